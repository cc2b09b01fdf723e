// TKTimer on TKRunLoop: never early, deadline order, skipped (not caught-up) repeats, fire(),
// invalidate(), fire-date changes, several modes, tolerance, cross-thread rescheduling, a timer
// handed to a thread subclass (the seed's CustomThread), userInfo.
import Foundation
import Synchronization
import Testing
import ThreadKit
import XCTest

final class RunLoopTimerTests: XCTestCase {
    let custom: TKRunLoop.Mode = "timers"

    func testAOneShotTimerNeverFiresEarly() {
        let loop = TKRunLoop.current
        for ms in [1, 10, 30] {
            let due = ContinuousClock.now + .milliseconds(ms)
            let firedAt = Shared<ContinuousClock.Instant?>(nil)
            loop.add(TKTimer(fireAt: due, interval: .zero, repeats: false) { _ in firedAt.value = .now }, forMode: custom)
            XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
            XCTAssertGreaterThanOrEqual(firedAt.value!, due, "fired before its fire date")
        }
    }

    func testAThousandTimersFireExactlyOnceInDeadlineOrder() {
        let loop = TKRunLoop.current
        var generator = SystemRandomNumberGenerator()
        let start = ContinuousClock.now + .milliseconds(5)
        let fired = Shared<[(Int, ContinuousClock.Instant)]>([])
        var dues: [ContinuousClock.Instant] = []
        for i in 0..<1000 {
            let due = start + .microseconds(Int.random(in: 0..<200_000, using: &generator))
            dues.append(due)
            loop.add(TKTimer(fireAt: due, interval: .zero, repeats: false) { _ in fired.value.append((i, .now)) }, forMode: custom)
        }
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(60), returnAfterSourceHandled: false), .finished)
        XCTAssertEqual(fired.value.count, 1000)
        XCTAssertEqual(Set(fired.value.map(\.0)).count, 1000, "a timer fired twice")
        let order = fired.value.map(\.0)
        let expected = (0..<1000).sorted { dues[$0] != dues[$1] ? dues[$0] < dues[$1] : $0 < $1 }
        XCTAssertEqual(order, expected, "not in deadline order")
        for (i, at) in fired.value { XCTAssertGreaterThanOrEqual(at, dues[i]) }
    }

    func testARepeatingTimerSkipsFiresMissedByASlowHandler() {
        let loop = TKRunLoop.current
        let interval = Duration.milliseconds(20)
        let first = ContinuousClock.now + interval
        let fires = Shared<[ContinuousClock.Instant]>([])
        let timer = TKTimer(fireAt: first, interval: interval, repeats: true) { t in
            fires.value.append(.now)
            if fires.value.count == 1 { TKThread.sleep(for: .milliseconds(70)) } // misses slots 2, 3 and 4
            if fires.value.count == 3 { t.invalidate() }
        }
        loop.add(timer, forMode: custom)
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
        XCTAssertEqual(fires.value.count, 3)
        // The missed slots (first+20, +40, +60) are dropped: the next fire is the slot after the
        // handler returned (first+80), not three quick catch-up fires.
        XCTAssertGreaterThanOrEqual(fires.value[1], first + .milliseconds(80))
        XCTAssertGreaterThanOrEqual(fires.value[2], first + .milliseconds(100), "the schedule kept its original slots")
    }

    func testFireRunsNowAndInvalidatesAOneShotTimer() {
        let calls = Shared(0)
        let oneShot = TKTimer(interval: .seconds(60), repeats: false) { _ in calls.value += 1 }
        oneShot.fire()
        XCTAssertEqual(calls.value, 1)
        XCTAssertFalse(oneShot.isValid)
        oneShot.fire()
        XCTAssertEqual(calls.value, 1)
        let repeating = TKTimer(interval: .seconds(60), repeats: true) { _ in calls.value += 1 }
        repeating.fire()
        XCTAssertTrue(repeating.isValid)
        XCTAssertEqual(calls.value, 2)
        repeating.invalidate()
    }

    func testANonRepeatingTimerReportsAZeroInterval() {
        // NSTimer's timeInterval: "If the receiver is a non-repeating timer, returns 0 (even if a
        // time interval was set)"; a repeating one keeps its interval.
        let due = ContinuousClock.now + .seconds(60)
        let oneShot = TKTimer(fireAt: due, interval: .seconds(5), repeats: false) { _ in }
        XCTAssertEqual(oneShot.interval, .zero)
        XCTAssertEqual(oneShot.fireDate, due, "the fire date still comes from the argument")
        XCTAssertEqual(TKTimer(interval: .seconds(5), repeats: false) { _ in }.interval, .zero)
        XCTAssertEqual(TKTimer(interval: .seconds(5), repeats: true) { _ in }.interval, .seconds(5))
        XCTAssertEqual(TKTimer(interval: .zero, repeats: true) { _ in }.interval, .microseconds(100))
    }

    func testFiredAndInvalidatedTimersAreFreed() {
        let loop = TKRunLoop.current
        let alive = Freed.alive { freed in
            let fired = Flag()
            let oneShot = TKTimer(interval: .milliseconds(1), repeats: false) { _ in fired.set() }
            let repeating = TKTimer(interval: .milliseconds(1), repeats: true) { timer in timer.invalidate() }
            let invalidatedEarly = TKTimer(interval: .seconds(3600), repeats: true) { _ in }
            let delayed = TKTimer(interval: .seconds(3600), repeats: false) { _ in }
            let addedAfterInvalidation = TKTimer(interval: .seconds(3600), repeats: true) { _ in }
            freed.watch("timer added to the common modes after it was invalidated", addedAfterInvalidation)
            addedAfterInvalidation.invalidate()
            loop.add(addedAfterInvalidation, forMode: .common)
            freed.watch("one-shot timer after its fire", oneShot)
            freed.watch("repeating timer that invalidated itself", repeating)
            freed.watch("timer invalidated before its fire date", invalidatedEarly)
            freed.watch("timer whose fire date moved", delayed)
            loop.add(oneShot, forMode: custom)
            loop.add(repeating, forMode: custom)
            loop.add(invalidatedEarly, forMode: .common)
            loop.add(invalidatedEarly, forMode: custom)
            loop.add(delayed, forMode: custom)
            delayed.fireDate = .now + .seconds(7200)
            invalidatedEarly.invalidate()
            delayed.invalidate()
            let deadline = ContinuousClock.now + .seconds(30)
            while (!fired.isSet || repeating.isValid) && ContinuousClock.now < deadline {
                loop.run(mode: custom, for: .milliseconds(10), returnAfterSourceHandled: false)
            }
        }
        XCTAssertEqual(alive, [])
    }

    func testInvalidatedTimersNeverFire() {
        let loop = TKRunLoop.current
        let fired = Shared(false)
        let timer = TKTimer(interval: .milliseconds(1), repeats: false) { _ in fired.value = true }
        loop.add(timer, forMode: custom)
        timer.invalidate()
        XCTAssertEqual(loop.run(mode: custom, for: .milliseconds(20), returnAfterSourceHandled: false), .finished)
        XCTAssertFalse(fired.value)
    }

    func testChangingTheFireDateReschedules() {
        let loop = TKRunLoop.current
        let firedAt = Shared<ContinuousClock.Instant?>(nil)
        let timer = TKTimer(interval: .seconds(3600), repeats: false) { _ in firedAt.value = .now }
        loop.add(timer, forMode: custom)
        XCTAssertEqual(loop.nextTimerFireDate(forMode: custom), timer.fireDate)
        let sooner = ContinuousClock.now + .milliseconds(15)
        timer.fireDate = sooner
        XCTAssertEqual(loop.nextTimerFireDate(forMode: custom), sooner)
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .finished)
        XCTAssertGreaterThanOrEqual(firedAt.value!, sooner)
        XCTAssertNil(loop.nextTimerFireDate(forMode: custom))
    }

    func testATimerInTwoModesFiresInEither() {
        let loop = TKRunLoop.current
        let modes = Shared<[String]>([])
        let timer = TKTimer(fireAt: .now, interval: .milliseconds(1), repeats: true) { _ in
            modes.value.append(loop.currentMode?.rawValue ?? "-")
        }
        loop.add(timer, forMode: custom)
        loop.add(timer, forMode: "second")
        loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false, until: { modes.value.contains("timers") })
        loop.run(mode: "second", for: .seconds(30), returnAfterSourceHandled: false, until: { modes.value.contains("second") })
        timer.invalidate()
        XCTAssertEqual(modes.value.first, "timers")
        XCTAssertEqual(modes.value.last, "second")
    }

    func testToleranceNeverMakesATimerEarly() {
        let loop = TKRunLoop.current
        let due = ContinuousClock.now + .milliseconds(10)
        let firedAt = Shared<ContinuousClock.Instant?>(nil)
        let timer = TKTimer(fireAt: due, interval: .zero, repeats: false) { _ in firedAt.value = .now }
        timer.tolerance = .milliseconds(5)
        XCTAssertEqual(timer.tolerance, .milliseconds(5))
        loop.add(timer, forMode: custom)
        loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false)
        XCTAssertGreaterThanOrEqual(firedAt.value!, due)
    }

    func testScheduledTimerUsesTheCurrentLoopsDefaultMode() {
        // On a secondary thread, whose loop runs out of work once the timer fired (the main
        // loop's default mode never does: it also serves Dispatch's main queue).
        let fired = Shared(false)
        let t = TKThread {
            TKTimer.scheduledTimer(withInterval: .milliseconds(1), repeats: false) { _ in fired.value = true }
            TKRunLoop.current.run(until: .now + .seconds(30))
        }
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(30)))
        XCTAssertTrue(fired.value)
    }

    /// The seed's CustomThread (times scaled by 1/10): a repeating timer created on this thread is
    /// handed to a TKThread subclass, added there in the common modes, and fires on that thread
    /// while its loop runs run(until:), never before its fire date or its slot; run(until:) runs
    /// to its deadline.
    func testATimerHandedToAThreadSubclassFiresThereWhileItsLoopRunsUntilADate() {
        final class CustomThread: TKThread, @unchecked Sendable {
            let myTimer: TKTimer
            let runFor: Duration
            let ranFor = Guarded<Duration?>(nil)
            let pthread = Guarded<pthread_t?>(nil)
            let finished = DispatchSemaphore(value: 0)
            init(myTimer: TKTimer, runFor: Duration) {
                self.myTimer = myTimer
                self.runFor = runFor
                super.init()
            }
            override func main() {
                pthread.withLock { $0 = pthread_self() }
                let loop = TKRunLoop.current
                loop.add(myTimer, forMode: .common)
                let start = ContinuousClock.now
                loop.run(until: start + runFor)
                ranFor.withLock { $0 = ContinuousClock.now - start }
                finished.signal()
            }
        }
        let created = ContinuousClock.now
        let fireDate = created + .milliseconds(100)
        let interval = Duration.milliseconds(50)
        let fires = Guarded<[(at: ContinuousClock.Instant, thread: pthread_t)]>([])
        let timer = TKTimer(fireAt: fireDate, interval: interval, repeats: true) { _ in
            fires.withLock { $0.append((.now, pthread_self())) }
        }
        let thread = CustomThread(myTimer: timer, runFor: .milliseconds(500))
        thread.start()
        XCTAssertEqual(thread.finished.wait(timeout: .now() + 30), .success)
        timer.invalidate()
        let recorded = fires.withLock { $0 }
        let threadID = thread.pthread.withLock { $0 }
        XCTAssertFalse(recorded.isEmpty, "the timer never fired on the thread it was handed to")
        XCTAssertLessThanOrEqual(recorded.count, 9, "more fires than slots between 100 and 500 ms")
        for (slot, fire) in recorded.enumerated() {
            XCTAssertGreaterThanOrEqual(fire.at, fireDate + interval * slot, "fire \(slot) came before its slot")
            XCTAssertTrue(threadID.map { pthread_equal($0, fire.thread) != 0 } ?? false, "fire \(slot) ran off the subclass's thread")
        }
        XCTAssertGreaterThanOrEqual(thread.ranFor.withLock { $0 } ?? .zero, .milliseconds(500), "run(until:) returned before its date")
    }

    /// NSTimer's userInfo: what the creator hands the timer, read by the block through the timer.
    func testAScheduledTimerCarriesUserInfoToItsBlock() {
        let seen = Guarded<[String]>([])
        let timerBox = Guarded<TKTimer?>(nil)
        let t = TKThread {
            let timer = TKTimer.scheduledTimer(withInterval: .milliseconds(1), repeats: true, userInfo: "This is a arg") { sender in
                let count = seen.withLock {
                    $0.append(sender.userInfo as? String ?? "nil")
                    return $0.count
                }
                if count == 3 { sender.invalidate() }
            }
            timerBox.withLock { $0 = timer }
            TKRunLoop.current.run(until: .now + .seconds(30))
        }
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(30)))
        XCTAssertEqual(seen.withLock { $0 }, ["This is a arg", "This is a arg", "This is a arg"])
        XCTAssertEqual(timerBox.withLock { $0 }?.userInfo as? String, "This is a arg", "userInfo is readable from another thread")
        XCTAssertNil(TKTimer(interval: .seconds(1), repeats: false) { _ in }.userInfo, "userInfo defaults to nil")
        let info = TKTimer(fireAt: .now, interval: .zero, repeats: false, userInfo: 42) { _ in }.userInfo
        XCTAssertEqual(info as? Int, 42)
    }

    func testRescheduleFromAnotherThreadWakesTheLoop() {
        let worker = LoopThread()
        defer { worker.finish() }
        let fired = DispatchSemaphore(value: 0)
        let timer = TKTimer(interval: .seconds(3600), repeats: false) { _ in fired.signal() }
        worker.loop.add(timer, forMode: .default)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting })
        timer.fireDate = .now + .milliseconds(5)
        XCTAssertEqual(fired.wait(timeout: .now() + 30), .success, "the sleeping loop did not re-arm for the new date")
    }
}

extension TKRunLoop {
    /// Runs `mode` pass by pass until `condition` holds or the time is up.
    fileprivate func run(mode: Mode, for duration: Duration, returnAfterSourceHandled: Bool, until condition: () -> Bool) {
        let deadline = ContinuousClock.now + duration
        while !condition() && ContinuousClock.now < deadline {
            _ = run(mode: mode, for: .milliseconds(50), returnAfterSourceHandled: true)
        }
    }
}

/// Misuses of timers, each an exit test (Support/MisuseAssertions.swift).
@Suite struct RunLoopTimerExitTests {
    @Test func aTimerInTheLoopsOfTwoThreadsStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TKTimer(interval: .seconds(60), repeats: false) { _ in }
            TKRunLoop.main.add(timer, forMode: .default)
            let t = TKThread { TKRunLoop.current.add(timer, forMode: .default) }
            t.isDetached = false
            t.start()
            t.join()
        }
        expectMisuse(result, mentions: ["TKTimer added to the run loop of thread", "a timer belongs to one run loop", "Fix:"])
    }
}
