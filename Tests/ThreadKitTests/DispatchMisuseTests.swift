// Every dispatch misuse diagnostic (SPEC §6, RELIABILITY.md "Misuse"), each an exit test: the
// misuse runs in a child process of the test runner, which must stop with standard error naming
// the object, the call and the fix. libdispatch dies with SIGILL and no message on each of these.
// What needs the process's main thread (which an exit test's body does not run on) or a program
// of its own stays a role of Tests/ThreadKitTestChild, in DispatchMainThreadTests below.
import Glibc
import Testing
import ThreadKit
import XCTest

@Suite struct DispatchMisuseTests {
    @Test func syncOntoTheCurrentQueueStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = TKDispatchQueue(label: "photos")
            queue.sync { queue.sync {} }
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"photos\".sync", "deadlock", "Fix:"])
    }

    @Test func syncOntoAQueueWhoseTargetIsCurrentStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let parent = TKDispatchQueue(label: "parent")
            let child = TKDispatchQueue(label: "child", target: parent)
            let done = TKDispatchSemaphore(value: 0)
            parent.async {
                child.sync {}
                done.signal()
            }
            done.wait()
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"child\".sync", "TKDispatchQueue \"parent\"", "target chain"])
    }

    @Test func barrierSyncFromInsideTheConcurrentQueueStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = TKDispatchQueue(label: "store", attributes: .concurrent)
            let done = TKDispatchSemaphore(value: 0)
            queue.async {
                queue.sync(flags: .barrier) {}
                done.signal()
            }
            done.wait()
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"store\".sync(flags: .barrier)", "deadlock"])
    }

    @Test func anUnbalancedLeaveStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let group = TKDispatchGroup()
            group.enter()
            group.leave()
            group.leave()
        }
        expectMisuse(result, mentions: ["TKDispatchGroup.leave()", "unbalanced", "Fix:"])
    }

    @Test func overResumingAQueueStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = TKDispatchQueue(label: "uploads")
            queue.suspend()
            queue.resume()
            queue.resume()
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"uploads\".resume()", "suspend()", "Fix:"])
    }

    @Test func overResumingASourceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let source = TKDispatchSource.makeUserDataAddSource(queue: .global())
            source.activate()
            source.resume()
        }
        expectMisuse(result, mentions: ["TKDispatchSource", "resume()", "Fix:"])
    }

    @Test func aNegativeSemaphoreStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = TKDispatchSemaphore(value: -1)
        }
        expectMisuse(result, mentions: ["TKDispatchSemaphore(value: -1)", "Fix:"])
    }

    @Test func dispatchMainOffTheMainThreadStopsTheProcess() async {
        // The exit test's body runs on a thread of Swift's concurrency pool, not the main thread.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDispatch.main()
        }
        expectMisuse(result, mentions: ["TKDispatch.main()", "not the main thread", "Fix:"])
    }
}

/// What needs a process of its own: its main thread, the tour's output, signals to the process.
final class DispatchMainThreadTests: XCTestCase {
    /// The tour's gcd-sync-deadlock scenario narrates the child's diagnostic line, not the crash
    /// report the runtime adds after it (the tour itself runs with the backtracer enabled).
    func testTheSyncDeadlockTourScenarioShowsTheDiagnosticNotTheBacktrace() throws {
        let result = try ChildProcess.runCommand(["tour", "gcd-sync-deadlock"], backtracer: true)
        XCTAssertEqual(result.status, 0, "tour failed: \(result.standardOutput)")
        XCTAssertTrue(result.standardOutput.contains("verdict: PASS"), result.standardOutput)
        let diagnostic = result.standardOutput.split(separator: "\n").filter { $0.contains("ThreadKit misuse:") }
        XCTAssertEqual(diagnostic.count, 1, "the diagnostic should be narrated once: \(result.standardOutput)")
        XCTAssertTrue(diagnostic.first?.contains("TKDispatchQueue \"photos\".sync") ?? false, result.standardOutput)
        for crashReport in ["Backtracing", "Program crashed", "Registers:", "Fatal error", "Thread 0"] {
            XCTAssertFalse(
                result.standardOutput.contains(crashReport) || result.standardError.contains(crashReport),
                "the child's crash report reached the tour's output (\(crashReport)): \(result.standardOutput)\n\(result.standardError)")
        }
    }

    func testSyncOntoTheMainQueueFromTheMainThreadStopsTheProcess() throws {
        try assertMisuse("dispatch-sync-main-on-main", mentions: ["main", "deadlock", "Fix:"])
    }

    func testDispatchMainServesTheMainQueueForever() throws {
        let result = try ChildProcess.run("dispatch-main")
        XCTAssertEqual(result.status, 0, "stdout: \(result.standardOutput) stderr: \(result.standardError)")
        for i in 1...3 { XCTAssertTrue(result.standardOutput.contains("main queue item \(i)")) }
        XCTAssertTrue(result.standardOutput.contains("on main thread: 3"))
    }

    func testASignalSourceCatchesSignalsForTheProcess() throws {
        // SIGTERM's default action would kill the child; with a source it is delivered instead.
        let result = try ChildProcess.run("dispatch-signal-source")
        XCTAssertEqual(result.status, 0, "stdout: \(result.standardOutput) stderr: \(result.standardError)")
        XCTAssertFalse(result.signalled)
        XCTAssertTrue(result.standardOutput.contains("caught SIGUSR1 and SIGTERM"))
    }
}
