import Foundation
import Synchronization
import Testing
import XCTest

// TKRunLoop: run results, perform blocks, version-0 sources, observers, modes and common modes,
// stop/wakeUp, nested runs, misuse, and no leaked descriptors. Timers: RunLoopTimerTests.
@testable import ThreadKit

/// A TKThread running its own loop until told to stop, for cross-thread tests.
final class LoopThread: @unchecked Sendable {
    let thread: TKThread
    private let ready = DispatchSemaphore(value: 0)
    private let loopBox = Shared<TKRunLoop?>(nil) // written once by the thread before `ready`
    let keepAlive = TKRunLoopSource {}
    let done = Flag()

    init(name: String = "loop") {
        let box = loopBox
        let ready = ready
        let keepAlive = keepAlive
        let done = done
        thread = TKThread(name: name) {
            let loop = TKRunLoop.current
            loop.add(keepAlive, forMode: .default)
            box.value = loop
            ready.signal()
            while !done.isSet {
                _ = loop.run(mode: .default, before: .now + .seconds(60))
            }
        }
        thread.start()
        ready.wait()
    }

    var loop: TKRunLoop { loopBox.value! }

    func finish() {
        done.set()
        // stop() from here could land between two runs and be lost (it ends only a run in
        // progress, as CFRunLoopStop); a block stops the run that executes it.
        loop.perform { TKRunLoop.current.stop() }
        let joined = thread.join(until: .now + .seconds(30))
        // Where the loop's thread is (its stack and wait), should it ever not stop: the dump is how
        // a nested run taking the enclosing run's wake-up was found (docs/Reliability.md).
        XCTAssertTrue(joined, "the loop's thread did not stop within 30 s:\n\(joined ? "" : TKDiagnostics.threadDump())")
    }
}

final class RunLoopTests: XCTestCase {
    let custom: TKRunLoop.Mode = "custom"

    func testAnEmptyModeReturnsAtOnce() {
        // A secondary thread's loop: the main loop's common modes are never empty (below).
        let t = TKThread {
            let loop = TKRunLoop.current
            XCTAssertEqual(loop.run(mode: "nothing-here", for: .seconds(30), returnAfterSourceHandled: false), .finished)
            XCTAssertFalse(loop.run(mode: "nothing-here", before: .now + .seconds(30)))
            loop.run(until: .now + .seconds(30)) // default mode empty too: returns at once
        }
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(20)), "an empty mode did not return at once")
    }

    func testTheMainLoopInACommonModeIsNeverEmptyAsInCoreFoundation() {
        // It stands for Dispatch's main queue and the main actor (docs/Concurrency.md §1): a run
        // with nothing of its own waits for its deadline instead of finishing at once.
        XCTAssertEqual(TKRunLoop.main.run(mode: .default, for: .milliseconds(20), returnAfterSourceHandled: false), .timedOut)
        // A mode outside the common set is still empty.
        XCTAssertEqual(TKRunLoop.main.run(mode: "nothing-here", for: .seconds(30), returnAfterSourceHandled: false), .finished)
    }

    func testCurrentIsOnePerThreadAndMainIsTheMainThreads() {
        XCTAssertTrue(TKRunLoop.current === TKRunLoop.current)
        XCTAssertTrue(TKRunLoop.current === TKRunLoop.main, "tests run on the main thread")
        let other = Shared<TKRunLoop?>(nil)
        let t = TKThread { other.value = TKRunLoop.current }
        t.start()
        t.join()
        XCTAssertTrue(other.value !== TKRunLoop.main)
    }

    func testPerformBlocksRunInOrderOnTheLoopThread() {
        let loop = TKRunLoop.current
        let order = Shared<[Int]>([])
        for i in 0..<5 { loop.perform { order.value.append(i) } }
        XCTAssertEqual(loop.run(mode: .default, for: .zero, returnAfterSourceHandled: false), .timedOut)
        XCTAssertEqual(order.value, [0, 1, 2, 3, 4])
    }

    func testPerformFromAnotherThreadWakesASleepingLoop() {
        let worker = LoopThread()
        defer { worker.finish() }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting }, "the loop never slept")
        let ranOn = Shared<UInt32>(0)
        let done = DispatchSemaphore(value: 0)
        worker.loop.perform {
            ranOn.value = UInt32(KernelThread.currentID())
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "perform did not wake the loop")
        XCTAssertEqual(ranOn.value, worker.thread.attributes.current.tid)
    }

    func testCrossThreadPerformBlocksAllRunExactlyOnceInOrder() {
        let worker = LoopThread()
        defer { worker.finish() }
        let count = stress(100_000)
        let seen = Shared<[Int]>([]) // loop thread only until `done`
        let done = DispatchSemaphore(value: 0)
        for i in 0..<count {
            worker.loop.perform {
                seen.value.append(i)
                if i == count - 1 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(seen.value.count, count)
        XCTAssertTrue(seen.value.elementsEqual(0..<count))
    }

    func testBlocksForOtherModesWait() {
        let loop = TKRunLoop.current
        let ran = Shared<[String]>([])
        loop.perform(inModes: [custom]) { ran.value.append("custom") }
        loop.perform(inModes: [.default]) { ran.value.append("default") }
        loop.run(mode: .default, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, ["default"])
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, ["default", "custom"])
    }

    // MARK: Sources

    func testASignalledSourcePerformsOnTheLoopThreadAfterWakeUp() {
        let worker = LoopThread()
        defer { worker.finish() }
        let performed = DispatchSemaphore(value: 0)
        let scheduled = Shared<[String]>([]) // guarded by lock
        let lock = NSLock()
        let source = TKRunLoopSource(
            order: 0,
            schedule: { _, mode in
                lock.lock()
                scheduled.value.append("schedule \(mode)")
                lock.unlock()
            },
            cancel: { _, mode in
                lock.lock()
                scheduled.value.append("cancel \(mode)")
                lock.unlock()
            }
        ) {
            performed.signal()
        }
        worker.loop.add(source, forMode: .default)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting })
        source.signal()
        XCTAssertTrue(source.isSignaled)
        worker.loop.wakeUp()
        XCTAssertEqual(performed.wait(timeout: .now() + 30), .success)
        XCTAssertFalse(source.isSignaled)
        source.invalidate()
        XCTAssertFalse(source.isValid)
        source.signal() // ignored once invalid
        XCTAssertFalse(source.isSignaled)
        lock.lock()
        defer { lock.unlock() }
        XCTAssertEqual(scheduled.value, ["schedule kCFRunLoopDefaultMode", "cancel kCFRunLoopDefaultMode"])
    }

    func testSourcesPerformInOrderAndCountAsHandled() {
        let loop = TKRunLoop.current
        let log = Shared<[Int]>([])
        let sources = [3, 1, 2].map { n in TKRunLoopSource(order: n) { log.value.append(n) } }
        for s in sources {
            loop.add(s, forMode: custom)
            s.signal()
        }
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        XCTAssertEqual(log.value, [1, 2, 3])
        for s in sources { loop.remove(s, forMode: custom) }
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .finished)
    }

    // MARK: Observers

    func testObserverTraceOfAPassWokenByATimer() {
        let loop = TKRunLoop.current
        let trace = Shared<[String]>([])
        let observer = TKRunLoopObserver(activities: .allActivities) { _, activity in trace.value.append("\(activity)") }
        loop.add(observer, forMode: custom)
        let timer = TKTimer(interval: .milliseconds(5), repeats: false) { _ in trace.value.append("timer") }
        loop.add(timer, forMode: custom)
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
        loop.remove(observer, forMode: custom)
        XCTAssertEqual(trace.value, ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer", "exit"])
    }

    func testANonRepeatingObserverIsCalledOnceThenInvalidated() {
        let loop = TKRunLoop.current
        let calls = Shared(0)
        let once = TKRunLoopObserver(activities: [.entry, .exit], repeats: false) { _, _ in calls.value += 1 }
        loop.add(once, forMode: custom)
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(calls.value, 1)
        XCTAssertFalse(once.isValid)
        keep.invalidate()
    }

    func testAnObserverWatchesOneLoopAtATime() throws {
        // CFRunLoopObserver belongs to one loop: a second loop is refused while the first has it
        // (RunLoopExitTests), and accepted once it was removed from every mode of the first.
        let observer = TKRunLoopObserver(activities: .entry) { _, _ in }
        let loop = TKRunLoop.current
        loop.add(observer, forMode: custom)
        loop.add(observer, forMode: "second")
        loop.remove(observer, forMode: custom)
        loop.remove(observer, forMode: "second")
        let entered = DispatchSemaphore(value: 0)
        let counted = TKRunLoopObserver(activities: .entry) { _, _ in entered.signal() }
        let other = Workers.start {
            let here = TKRunLoop.current
            here.add(observer, forMode: .default)
            here.add(counted, forMode: .default)
            let source = TKRunLoopSource {} // something to handle, so the run returns after it
            here.add(source, forMode: .default)
            source.signal()
            here.run(mode: .default, before: .now + .seconds(30))
            source.invalidate()
        }
        XCTAssertEqual(entered.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(other.wait(timeout: .now() + 30), .success)
        observer.invalidate()
        counted.invalidate()
    }

    func testTheLoopOfAFinishedThreadAndWhatItHeldAreFreed() {
        let alive = Freed.alive { freed in
            let thread = TKThread {
                let loop = TKRunLoop.current
                freed.watch("loop", loop)
                let observer = TKRunLoopObserver(activities: .allActivities) { _, _ in }
                let source = TKRunLoopSource {}
                let timer = TKTimer(interval: .seconds(3600), repeats: true) { _ in }
                freed.watch("observer", observer)
                freed.watch("source", source)
                freed.watch("timer", timer)
                loop.add(observer, forMode: .default)
                loop.add(source, forMode: .common)
                loop.add(timer, forMode: .common)
                loop.perform { TKRunLoop.current.stop() }
                loop.run(mode: .default, for: .seconds(30), returnAfterSourceHandled: false)
                // Left scheduled: the thread's end releases them with its loop.
            }
            freed.watch("thread", thread)
            thread.start()
            thread.join()
        }
        XCTAssertEqual(alive, [])
    }

    func testAnInvalidatedObserverIsFreed() {
        let loop = TKRunLoop.current
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        defer { keep.invalidate() }
        let alive = Freed.alive { freed in
            let observer = TKRunLoopObserver(activities: .entry) { observer, _ in _ = observer.isValid }
            let once = TKRunLoopObserver(activities: .entry, repeats: false) { _, _ in }
            freed.watch("observer", observer)
            freed.watch("non-repeating observer after its call", once)
            loop.add(observer, forMode: .common)
            loop.add(observer, forMode: custom)
            loop.add(once, forMode: custom)
            loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
            observer.invalidate()
        }
        XCTAssertEqual(alive, [])
    }

    func testObserversRunInOrder() {
        let loop = TKRunLoop.current
        let log = Shared<[Int]>([])
        let observers = [5, -1, 2].map { n in TKRunLoopObserver(activities: .entry, order: n) { _, _ in log.value.append(n) } }
        for o in observers { loop.add(o, forMode: custom) }
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(log.value, [-1, 2, 5])
        keep.invalidate()
        for o in observers { o.invalidate() }
    }

    // MARK: Modes

    func testItemsOfAnotherModeAreIgnored() {
        let loop = TKRunLoop.current
        let ran = Shared(false)
        let source = TKRunLoopSource { ran.value = true }
        loop.add(source, forMode: custom)
        source.signal()
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: "other")
        loop.run(mode: "other", for: .zero, returnAfterSourceHandled: false)
        XCTAssertFalse(ran.value, "a source of another mode ran")
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertTrue(ran.value)
        source.invalidate()
        keep.invalidate()
    }

    func testCommonItemsJoinModesAddedLater() {
        let worker = LoopThread()
        defer { worker.finish() }
        let loop = worker.loop
        let modes = Shared<[String]>([]) // loop thread only until read after a perform round trip
        let source = TKRunLoopSource(schedule: { _, mode in modes.value.append(mode.rawValue) }) {}
        loop.add(source, forMode: .common)
        loop.addCommonMode("tracking")
        XCTAssertEqual(Set(modes.value), ["kCFRunLoopDefaultMode", "tracking"])
        source.invalidate()
    }

    // MARK: Stop, wake, results

    func testStopFromAnotherThreadEndsRun() {
        let stopped = DispatchSemaphore(value: 0)
        let published = DispatchSemaphore(value: 0)
        let loopBox = Shared<TKRunLoop?>(nil) // written once before `published` is signalled
        let t = TKThread {
            let loop = TKRunLoop.current
            loop.add(TKRunLoopSource {}, forMode: .default)
            loopBox.value = loop
            published.signal()
            loop.run()
            stopped.signal()
        }
        t.start()
        published.wait()
        let loop = loopBox.value!
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { loop.isWaiting })
        loop.stop()
        XCTAssertEqual(stopped.wait(timeout: .now() + 30), .success)
        t.join()
    }

    func testStopWithNoRunInProgressHasNoEffect() {
        let loop = TKRunLoop.current
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        loop.stop()
        let deadline = ContinuousClock.now + .milliseconds(20)
        XCTAssertEqual(loop.run(mode: custom, for: .milliseconds(20), returnAfterSourceHandled: false), .timedOut)
        XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "timed out early")
        keep.invalidate()
    }

    func testNegativeDurationsCountAsZero() {
        let loop = TKRunLoop.current
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(-5), returnAfterSourceHandled: false), .timedOut)
        keep.invalidate()
    }

    func testNestedRunInAnotherModeFromACallback() {
        let loop = TKRunLoop.current
        let seen = Shared<[String]>([])
        let inner = TKRunLoopSource { seen.value.append("inner source in \(loop.currentMode?.rawValue ?? "-")") }
        loop.add(inner, forMode: "inner")
        let outer = TKRunLoopSource {
            seen.value.append("outer in \(loop.currentMode?.rawValue ?? "-")")
            inner.signal()
            loop.run(mode: "inner", for: .seconds(30), returnAfterSourceHandled: true)
            seen.value.append("back in \(loop.currentMode?.rawValue ?? "-")")
        }
        loop.add(outer, forMode: custom)
        outer.signal()
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        XCTAssertEqual(seen.value, ["outer in custom", "inner source in inner", "back in custom"])
        XCTAssertNil(loop.currentMode)
        inner.invalidate()
        outer.invalidate()
    }

    /// `stop()` ends the innermost run in progress (SPEC §2), and only that run: a modal run whose
    /// source callback calls `stop()` returns `.handledSource` first, and the stop ends with it —
    /// the run around it goes on (it used to return `.stopped` at once, as an application's `run()`
    /// would have) and ends when its mode empties.
    func testAStopTheRunDidNotActOnEndsWithItAsInCoreFoundation() {
        let loop = TKRunLoop.current
        let modal: TKRunLoop.Mode = "modal"
        let seen = Shared<[String]>([])
        let closer = TKRunLoopSource { loop.stop() }
        loop.add(closer, forMode: modal)
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        let outerSources = Shared<[TKRunLoopSource]>([])
        let finisher = TKRunLoopSource {
            seen.value.append("finisher")
            for source in outerSources.value { source.invalidate() }
        }
        let opener = TKRunLoopSource {
            closer.signal()
            let result = loop.run(mode: modal, for: .seconds(30), returnAfterSourceHandled: true)
            seen.value.append("modal \(result)")
            finisher.signal()
        }
        outerSources.value = [keep, finisher, opener]
        loop.add(finisher, forMode: custom)
        loop.add(opener, forMode: custom)
        opener.signal()
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
        XCTAssertEqual(seen.value, ["modal handledSource", "finisher"])
        closer.invalidate()

        // The same between two runs in a row: the second does not inherit the first one's stop.
        let keepAgain = TKRunLoopSource {}
        let stopper = TKRunLoopSource { loop.stop() }
        loop.add(keepAgain, forMode: custom)
        loop.add(stopper, forMode: custom)
        stopper.signal()
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        let emptier = Shared<TKRunLoopSource?>(nil)
        emptier.value = TKRunLoopSource {
            for source in [keepAgain, stopper, emptier.value].compactMap({ $0 }) { source.invalidate() }
        }
        loop.add(emptier.value!, forMode: custom)
        emptier.value!.signal()
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
        emptier.value = nil
    }

    /// A stop made for a run before a nested run began is the enclosing run's: the nested run
    /// leaves it alone and gives it back, and the enclosing run then stops.
    func testAStopForTheEnclosingRunSurvivesANestedRun() {
        let loop = TKRunLoop.current
        let modal: TKRunLoop.Mode = "modal"
        let keepModal = TKRunLoopSource {}
        loop.add(keepModal, forMode: modal)
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        let nestedResult = Shared<TKRunLoop.RunResult?>(nil)
        let caller = TKRunLoopSource {
            loop.stop()
            nestedResult.value = loop.run(mode: modal, for: .zero, returnAfterSourceHandled: false)
        }
        loop.add(caller, forMode: custom)
        caller.signal()
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .stopped)
        XCTAssertEqual(nestedResult.value, .timedOut, "the nested run took the enclosing run's stop")
        for source in [keepModal, keep, caller] { source.invalidate() }
    }

    /// A nested run may take a wake-up meant for the run that encloses it: here the nested run's
    /// own `stop()` wakes the loop, a block for the enclosing mode is posted from another thread
    /// while that wake-up is outstanding (so it writes nothing), and the nested run's sleep drains
    /// the eventfd. The enclosing pass, which had already run its blocks, must look again instead
    /// of sleeping to its deadline (CI saw a loop thread miss its default-mode `stop` this way).
    func testABlockWhoseWakeUpANestedRunTookStillRunsInTheEnclosingRun() {
        let worker = LoopThread()
        defer { worker.finish() }
        let loop = worker.loop
        let marked = DispatchSemaphore(value: 0)
        let nested = Shared<TKRunLoop.RunResult?>(nil)
        let custom = custom
        // Posted from the loop's thread by an observer just before the enclosing pass runs its
        // blocks, so that pass runs the nested run in its first block phase.
        let runNested: @Sendable () -> Void = {
            let current = TKRunLoop.current
            let keep = TKRunLoopSource {}
            current.add(keep, forMode: custom)
            current.perform(inModes: [custom]) {
                current.stop() // wakes the loop: the wake-up is outstanding from here
                let posted = DispatchSemaphore(value: 0)
                DispatchQueue.global().async {
                    loop.perform(inModes: [.default]) { marked.signal() }
                    posted.signal()
                }
                posted.wait()
            }
            nested.value = current.run(mode: custom, for: .seconds(60), returnAfterSourceHandled: false)
            current.remove(keep, forMode: custom)
        }
        loop.perform {
            let observer = TKRunLoopObserver(activities: .beforeSources, repeats: false) { _, _ in
                TKRunLoop.current.perform(inModes: [.default], runNested)
            }
            TKRunLoop.current.add(observer, forMode: .default)
            TKRunLoop.current.wakeUp() // ends this pass, so the next one calls the observer
        }
        XCTAssertEqual(
            marked.wait(timeout: .now() + 20), .success,
            "the default-mode block whose wake-up the nested run took did not run (the loop slept on)")
        XCTAssertEqual(nested.value, .stopped)
    }

    func testManyWakeUpsWhileTheLoopIsBusyCostOneWrite() {
        let worker = LoopThread()
        defer { worker.finish() }
        let busy = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        worker.loop.perform {
            busy.signal()
            release.wait()
        } // keeps the loop thread busy
        busy.wait()
        let before = worker.loop.poll.wakeWrites.load(ordering: .relaxed)
        let ran = DispatchSemaphore(value: 0)
        for _ in 0..<1_000 {
            worker.loop.wakeUp()
            worker.loop.perform { ran.signal() }
        }
        let writes = worker.loop.poll.wakeWrites.load(ordering: .relaxed) - before
        release.signal()
        for _ in 0..<1_000 { XCTAssertEqual(ran.wait(timeout: .now() + 30), .success) }
        XCTAssertLessThanOrEqual(writes, 1, "\(writes) eventfd writes for 2,000 wake-ups while the loop was busy")
    }

    /// The seed's two-source demo in a child whose main thread runs the main loop: each source's
    /// schedule callback registers it on the main thread (the secondary one waiting until done),
    /// commands go main → secondary → main through the buffers, a one-shot timer on the main loop
    /// sends each next round (never early), and a stop command cancels the secondary source, whose
    /// loop then finishes. The demo is the tour's (Sources/threadkit/Tour/CustomSourceDemo.swift),
    /// so its child is the tour's too: `threadkit tour --child custom-source-demo`.
    func testTheSeedsTwoSourceDemoTradesCommandsBetweenTheMainAndASecondaryThread() throws {
        let rounds = 3
        let intervalMicroseconds = 100_000
        let result = try ChildProcess.runCommand(["tour", "--child", "custom-source-demo", "\(rounds)", "\(intervalMicroseconds / 1_000)"])
        XCTAssertEqual(result.status, 0, result.standardError)
        struct Event: Equatable {
            let what: String
            let round: Int
            let main: Bool
            let at: Int
        }
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        let events: [Event] = lines.filter { $0.hasPrefix("event ") }.compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            func value(_ key: String) -> String? { fields.first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) } }
            guard fields.count == 5, let round = value("round").flatMap(Int.init), let main = value("main"),
                let at = value("at_us").flatMap(Int.init)
            else { return nil }
            return Event(what: fields[1], round: round, main: main == "true", at: at)
        }
        func first(_ what: String, _ round: Int = 0) -> Int? { events.firstIndex { $0.what == what && $0.round == round } }
        let order = events.map { "\($0.what)#\($0.round)@\($0.main ? "main" : "secondary")" }
        var expected = [
            "register-main#0@main", "register-secondary#0@main", "send#1@main", "schedule-returned#0@secondary",
            "secondary-perform#1@secondary", "main-perform#1@main",
        ]
        for round in 2...rounds {
            expected += ["send#\(round)@main", "secondary-perform#\(round)@secondary", "main-perform#\(round)@main"]
        }
        expected += ["stop#0@secondary", "cancel-secondary#0@secondary", "unregister-secondary#0@main", "cancel-main#0@main"]
        XCTAssertEqual(order, expected, result.standardOutput)
        for round in 2...rounds {
            guard let send = first("send", round), let previous = first("main-perform", round - 1) else { continue }
            XCTAssertGreaterThanOrEqual(
                events[send].at - events[previous].at, intervalMicroseconds - 1,
                "round \(round) was sent before the timer armed by round \(round - 1) was due")
        }
        XCTAssertEqual(lines.last, "exit finished", "the secondary loop should end as empty once its source is cancelled")
    }

    func testThreadsLoopsLeaveNoFileDescriptorsBehind() throws {
        func openDescriptors() throws -> Int { try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count }
        let before = try openDescriptors()
        for _ in 0..<stress(10_000) {
            let t = TKThread { _ = TKRunLoop.current }
            t.start()
            t.join()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { (try? openDescriptors()) == before }, "descriptors leaked: \(before) before")
    }
}

/// Misuses of run loops, each an exit test (Support/MisuseAssertions.swift). The exit test's body
/// runs on a thread of Swift's concurrency pool, never the main thread.
@Suite struct RunLoopExitTests {
    @Test func anObserverInTheLoopsOfTwoThreadsStopsTheProcess() async {
        // CFRunLoopObserver belongs to one loop: a second loop is refused while the first has it.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let observer = TKRunLoopObserver(activities: .allActivities) { _, _ in }
            TKRunLoop.main.add(observer, forMode: .default)
            let t = TKThread { TKRunLoop.current.add(observer, forMode: .default) }
            t.isDetached = false
            t.start()
            t.join()
        }
        expectMisuse(
            result, mentions: ["TKRunLoopObserver added to the run loop of thread", "observes the loop of thread", "Fix:"])
    }

    @Test func performInNoModesIsRefused() async {
        // A block that may run in no mode would never run: refused, not silently kept forever.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKRunLoop.current.perform(inModes: []) {}
        }
        expectMisuse(result, mentions: ["perform(inModes: [])", "never runs", "Fix:"])
    }

    @Test func performOnTheMainThreadInNoModesIsRefused() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKThread.performOnMainThread(modes: []) {}
        }
        expectMisuse(result, mentions: ["performOnMainThread(modes: []) on TKRunLoop.main", "Fix:"])
    }

    @Test func runningAnotherThreadsLoopStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let main = TKRunLoop.main
            let t = TKThread { main.run(until: .now + .seconds(1)) }
            t.isDetached = false
            t.start()
            t.join()
        }
        expectMisuse(result, mentions: ["ThreadKit misuse: TKRunLoop.run called on thread", "the main thread"])
    }

    /// The message names the owner as the thread was named, however early its loop was made: by
    /// the thread's first statement, or by a perform request sent before the thread ran anything.
    @Test func runningAnotherThreadsLoopNamesTheOwningThreadWhoseFirstStatementMadeIt() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            runTheLoopOfThreadLoopOwner(madeByPerform: false)
        }
        expectOwnerNamed(result)
    }

    @Test func runningAnotherThreadsLoopNamesTheOwningThreadWhoseLoopAPerformRequestMade() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            runTheLoopOfThreadLoopOwner(madeByPerform: true)
        }
        expectOwnerNamed(result)
    }

    private func expectOwnerNamed(_ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation) {
        expectMisuse(result, mentions: ["ThreadKit misuse: TKRunLoop.run called on thread"], sourceLocation: sourceLocation)
        let standardError = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(
            standardError.range(of: #"but this run loop belongs to thread [0-9]+ \("loop-owner"\)\."#, options: .regularExpression) != nil,
            "\(standardError)", sourceLocation: sourceLocation)
    }
}

/// Runs, on the calling thread, the loop of a thread named "loop-owner", made as early as it can
/// be: by the thread's first statement, or by a perform request sent right after start(), before
/// the thread ran anything. A misuse: the process stops.
private func runTheLoopOfThreadLoopOwner(madeByPerform: Bool) {
    let gate = TKCondition()
    let state = OwnerState(go: !madeByPerform)
    let owner = TKThread(name: "loop-owner") {
        gate.withLock { while !state.go { gate.wait() } }
        let loop = TKRunLoop.current
        gate.withLock {
            state.loop = loop
            gate.broadcast()
        }
        TKThread.sleep(for: .seconds(3600))
    }
    owner.start()
    if madeByPerform {
        try! owner.perform {}
        gate.withLock {
            state.go = true
            gate.broadcast()
        }
    }
    let loop = gate.withLock { () -> TKRunLoop in
        while state.loop == nil { gate.wait() }
        return state.loop!
    }
    loop.run(until: .now + .seconds(1))
}

/// What the owner thread and the caller share in runTheLoopOfThreadLoopOwner.
private final class OwnerState: @unchecked Sendable {
    // safety: both fields are read and written only with the TKCondition `gate` held.
    var go: Bool
    var loop: TKRunLoop?
    init(go: Bool) { self.go = go }
}
