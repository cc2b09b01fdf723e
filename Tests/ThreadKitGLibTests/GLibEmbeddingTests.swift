// GLibEmbeddingTests: ThreadKit inside a GLib main loop and GLib inside a ThreadKit loop
// (ThreadKitGLib, docs/GLib.md). Each test runs a child process (ThreadKitGLibTestChild ROLE,
// Tests/ThreadKitGLibTestChild/GLibRoles.swift) that runs the real loops and prints what ran; the
// test judges those lines, the child's exit status and its standard error. No timing assertion
// except an upper bound on idle CPU, generous (50 ms over 1 s, where a spinning loop burns ~1 s).
#if GLib
    import XCTest

    final class GLibEmbeddingTests: XCTestCase {
        static let everyKind = [
            "timer-10ms", "timer-30ms", "fd", "port-1", "port-2", "perform-1", "perform-2", "perform-same-thread", "tkmain-1",
            "tkmain-2", "gcdmain-1", "gcdmain-2", "mainactor",
        ]

        func testAGLibMainLoopRunsEachKindOfThreadKitWorkExactlyOnceInOrderOnTheMainThread() throws {
            let result = try GLibChild.run("glib-all-work")
            XCTAssertEqual(result.status, 0, result.stderr)
            let ran = result.lines.filter { $0.hasPrefix("ran ") }.map { String($0.dropFirst(4)) }
            XCTAssertFalse(result.lines.contains("hang-guard fired"), "not every kind ran within 30 s: \(ran)")
            XCTAssertEqual(result.value("off-main-thread"), "0", "ThreadKit work ran off the main thread")
            XCTAssertEqual(ran.sorted(), Self.everyKind.sorted(), "each kind exactly once")
            // Order where order is promised: timers by fire date; perform blocks, each main queue and
            // each port's messages FIFO.
            for (first, second) in [
                ("timer-10ms", "timer-30ms"), ("perform-1", "perform-2"), ("tkmain-1", "tkmain-2"), ("gcdmain-1", "gcdmain-2"),
                ("port-1", "port-2"),
            ] {
                guard let a = ran.firstIndex(of: first), let b = ran.firstIndex(of: second) else { continue }
                XCTAssertLessThan(a, b, "\(first) ran after \(second): \(ran)")
            }
        }

        func testRemovingTheSourceStopsItCleanly() throws {
            let result = try GLibChild.run("glib-remove")
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(result.value("served"), "1", "the source did not serve before removal")
            XCTAssertEqual(result.value("released"), "true", "the removed source was not freed (leak)")
            XCTAssertEqual(result.value("after-remove"), "0", "ThreadKit work ran from GLib after the source was removed")
            let cpu = Int(result.value("after-remove-cpu-us") ?? "") ?? .max
            XCTAssertLessThan(cpu, 50_000, "GLib spun after the source was removed: \(cpu) µs of CPU in 0.3 s")
            XCTAssertEqual(
                result.value("ran-by-threadkit"), "\(Self.everyKind.count)",
                "work posted after removal was lost instead of waiting for ThreadKit's own loop")
        }

        func testAThreadKitLoopDrivingAGMainContextFiresGLibTimeoutsAndDescriptorWatches() throws {
            let result = try GLibChild.run("glib-drive-context")
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertNil(result.value("driver-error"))
            let events = result.lines.filter { $0.hasPrefix("event ") }.map { String($0.dropFirst(6)) }
            XCTAssertEqual(
                events.sorted(), ["tick-1", "tick-2", "tick-3", "timeout-30ms", "watch-in"], "each GLib source's callbacks once")
            XCTAssertEqual(events.filter { $0.hasPrefix("tick-") }, ["tick-1", "tick-2", "tick-3"], "the repeating timeout out of order")
            XCTAssertEqual(result.value("off-thread"), "0", "a GLib callback ran off the loop's thread")
            XCTAssertEqual(result.value("valid-after"), "false")
            XCTAssertEqual(result.value("acquirable"), "true", "the driver did not release the context")
        }

        func testAttachedAndIdleTheGLibProcessBurnsAlmostNoCPU() throws {
            let result = try GLibChild.run("glib-idle")
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(result.value("ran"), "\(Self.everyKind.count)", "the work before the idle second did not all run")
            let cpu = Int(result.value("idle-cpu-us") ?? "") ?? .max
            // A loop left readable (level-triggered) spins at ~1,000,000 µs per second.
            XCTAssertLessThan(cpu, 50_000, "attached and idle, the process used \(cpu) µs of CPU in 1 s")
        }

        func testIteratingTheMainLoopsSourceOffTheMainThreadStopsWithAMessage() throws {
            let result = try GLibChild.run("glib-wrong-thread")
            XCTAssertNotEqual(result.status, 0)
            XCTAssertFalse(result.stdout.contains("iterated without stopping"))
            XCTAssertTrue(result.stderr.contains("ThreadKit misuse: TKRunLoop.nextWakeDeadline(forMode:) called on thread"), result.stderr)
            XCTAssertTrue(result.stderr.contains("(the main thread)"), result.stderr)
            XCTAssertTrue(result.stderr.contains("Fix:"), result.stderr)
        }
    }
#endif
