import Foundation
import Synchronization
import XCTest

// TKNotificationQueue: .now/.asap/.whenIdle timing against the run-loop pass, coalescing on name,
// sender, both and none, dequeue, enqueue order, modes (.common included), cross-thread enqueue,
// the per-thread default queue, and a queue kept alive by what it holds. Each test keeps its loop
// alive with a source in the mode it runs, and runs the loop with a deadline until the awaited
// notification stops it: no sleeps.
@testable import ThreadKit

private let ping: TKNotification.Name = "Ping"
private let pong: TKNotification.Name = "Pong"
private let done: TKNotification.Name = "Done"

/// A notification named `name` from `object`, numbered `n` (userInfo["n"]) when given.
private func note(_ name: TKNotification.Name, _ object: AnyObject? = nil, _ n: Int? = nil) -> TKNotification {
    TKNotification(name: name, object: object, userInfo: n.map { ["n": $0] })
}

final class NotificationQueueTests: XCTestCase {
    final class Sender: Sendable {}

    let custom: TKRunLoop.Mode = "nq-custom"
    /// Keeps the modes the tests run alive; removed in tearDown.
    private var keepAlive: [(TKRunLoopSource, TKRunLoop.Mode)] = []

    override func tearDown() {
        for (source, _) in keepAlive { source.invalidate() }
        keepAlive = []
        super.tearDown()
    }

    /// Makes `mode` of the current loop runnable (a source that is never signalled).
    private func keepRunnable(_ mode: TKRunLoop.Mode) {
        let source = TKRunLoopSource {}
        TKRunLoop.current.add(source, forMode: mode)
        keepAlive.append((source, mode))
    }

    /// A center whose observer logs "name n" (n: userInfo["n"]) for every notification and stops
    /// the current loop when `done` arrives.
    private func loggingCenter(_ log: Shared<[String]>) -> TKNotificationCenter {
        let center = TKNotificationCenter()
        center.addObserver(forName: nil, object: nil) { note in
            let n = note.userInfo?["n"].map { " \($0)" } ?? ""
            log.value.append("\(note.name)\(n)")
            if note.name == done { TKRunLoop.current.stop() }
        }
        return center
    }

    /// Runs `mode` until `done` is posted (the observer stops the loop); fails after 30 s.
    private func runUntilDone(_ mode: TKRunLoop.Mode = .default, file: StaticString = #filePath, line: UInt = #line) {
        let result = TKRunLoop.current.run(mode: mode, for: .seconds(30), returnAfterSourceHandled: false)
        XCTAssertEqual(result, .stopped, "the loop was not stopped by the awaited notification", file: file, line: line)
    }

    // MARK: Posting styles

    func testNowPostsSynchronouslyAfterRemovingMatchingQueuedOnes() {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        queue.enqueue(note(ping, nil, 1), postingStyle: .asap)
        queue.enqueue(note(pong, nil, 2), postingStyle: .asap)
        queue.enqueue(note(ping, nil, 3), postingStyle: .now)
        XCTAssertEqual(log.value, ["Ping 3"], ".now posts at once, on this thread")
        keepRunnable(.default)
        queue.enqueue(note(done), postingStyle: .asap)
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping 3", "Pong 2", "Done"], "the queued Ping was coalesced into the .now one")
    }

    func testNowPostsOnlyWhenTheRunningLoopIsInOneOfItsModes() {
        let loop = TKRunLoop.current
        let custom = self.custom
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        // No loop running on this thread: posts whatever the modes.
        queue.enqueue(note(ping, nil, 0), postingStyle: .now, forModes: [custom])
        // Inside a run of `custom` (a perform block runs during the pass): only notifications for
        // `custom` (or .common, when `custom` is a common mode) post; the default is [.default].
        keepRunnable(custom)
        let done = Flag()
        loop.perform(inModes: [custom]) {
            queue.enqueue(note(ping, nil, 1), postingStyle: .now) // [.default]: not posted
            queue.enqueue(note(ping, nil, 2), postingStyle: .now, forModes: [custom]) // posted
            queue.enqueue(note(ping, nil, 3), postingStyle: .now, forModes: [.common]) // custom is not common
            queue.enqueue(note(ping, nil, 4), postingStyle: .now, forModes: [.default, custom])
            done.set()
            TKRunLoop.current.stop()
        }
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: false), .stopped)
        XCTAssertTrue(done.isSet)
        XCTAssertEqual(log.value, ["Ping 0", "Ping 2", "Ping 4"])
        // In the default mode, which is a common mode, .common posts.
        keepRunnable(.default)
        let inDefault = Flag()
        loop.perform(inModes: [.default]) {
            queue.enqueue(note(ping, nil, 5), postingStyle: .now, forModes: [.common])
            queue.enqueue(note(ping, nil, 6), postingStyle: .now, forModes: [custom]) // not posted
            inDefault.set()
            TKRunLoop.current.stop()
        }
        XCTAssertEqual(loop.run(mode: .default, for: .seconds(30), returnAfterSourceHandled: false), .stopped)
        XCTAssertTrue(inDefault.isSet)
        XCTAssertEqual(log.value, ["Ping 0", "Ping 2", "Ping 4", "Ping 5"])
    }

    func testAsapPostsAtTheEndOfThePassNotSynchronously() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let sleeps = TKRunLoopObserver(activities: .beforeWaiting, order: .max) { _, _ in log.value.append("sleep") }
        loop.add(sleeps, forMode: .default)
        defer { sleeps.invalidate() }
        loop.perform {
            queue.enqueue(note(ping), postingStyle: .asap)
            log.value.append("block done")
            queue.enqueue(note(done), postingStyle: .asap)
        }
        runUntilDone()
        XCTAssertEqual(
            Array(log.value.prefix(4)), ["block done", "Ping", "Done", "sleep"],
            "posted after the block returned, before the loop slept")
    }

    func testAsapQueuedWhileTheLoopIsNotRunningPostsAtTheStartOfTheNextPass() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        queue.enqueue(note(ping), postingStyle: .asap)
        loop.perform { log.value.append("block") }
        XCTAssertEqual(log.value, [])
        XCTAssertEqual(loop.run(mode: .default, for: .zero, returnAfterSourceHandled: false), .timedOut)
        XCTAssertEqual(log.value, ["Ping", "block"], "posted at beforeTimers, before the pass ran its blocks")
    }

    func testAsapQueuedByATimerPostsWhenThatPassEnds() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let passes = TKRunLoopObserver(activities: .beforeTimers, order: .max) { _, _ in log.value.append("pass") }
        loop.add(passes, forMode: .default)
        defer { passes.invalidate() }
        loop.add(
            TKTimer(interval: .milliseconds(1), repeats: false) { _ in
                queue.enqueue(note(done), postingStyle: .asap)
                log.value.append("timer")
            }, forMode: .default)
        runUntilDone()
        // The timer fires late in a pass (after the sleep): the notification posts as the next pass
        // begins, not from inside the timer.
        let tail = Array(log.value.drop { $0 != "timer" })
        XCTAssertEqual(tail.prefix(3), ["timer", "Done", "pass"])
    }

    func testWhenIdlePostsWhenTheLoopIsAboutToWaitAfterTheAsapOnes() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let trace = TKRunLoopObserver(activities: [.beforeWaiting, .afterWaiting], order: .max) { _, activity in
            log.value.append("\(activity)")
        }
        loop.add(trace, forMode: .default)
        defer { trace.invalidate() }
        loop.perform {
            queue.enqueue(note(done), postingStyle: .whenIdle)
            queue.enqueue(note(pong), postingStyle: .asap)
            log.value.append("block")
        }
        runUntilDone()
        XCTAssertEqual(
            log.value, ["block", "Pong", "Done", "beforeWaiting", "afterWaiting"],
            "asap first, then the idle one, both before the loop slept")
    }

    func testWhenIdleWaitsWhileTheLoopIsBusy() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let rounds = Shared(0)
        let busy = Shared<TKRunLoopSource?>(nil)
        busy.value = TKRunLoopSource {
            rounds.value += 1
            log.value.append("busy \(rounds.value)")
            if rounds.value < 5 { busy.value!.signal() } // handled sources: the pass polls, it is not idle
        }
        loop.add(busy.value!, forMode: .default)
        defer { busy.value!.invalidate() }
        queue.enqueue(note(done), postingStyle: .whenIdle)
        busy.value!.signal()
        runUntilDone()
        XCTAssertEqual(log.value, ["busy 1", "busy 2", "busy 3", "busy 4", "busy 5", "Done"])
    }

    func testAsapQueuedByAnIdleObserverDoesNotWaitForTheNextWakeUp() {
        let log = Shared<[String]>([])
        let center = loggingCenter(log)
        let queue = TKNotificationQueue(notificationCenter: center)
        center.addObserver(forName: ping, object: nil) { _ in queue.enqueue(note(done), postingStyle: .asap) }
        keepRunnable(.default)
        queue.enqueue(note(ping), postingStyle: .whenIdle)
        let start = ContinuousClock.now
        runUntilDone() // nothing else would wake the loop for 30 s
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10))
        XCTAssertEqual(log.value, ["Ping", "Done"])
    }

    // MARK: Coalescing

    /// Queues `notes` (whenIdle) with `mask`, runs until idle, returns what was posted.
    private func coalesced(_ mask: TKNotificationQueue.Coalescing, _ notes: [TKNotification]) -> [String] {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        for n in notes { queue.enqueue(n, postingStyle: .whenIdle, coalesceMask: mask) }
        queue.enqueue(note(done), postingStyle: .whenIdle, coalesceMask: [])
        runUntilDone()
        return log.value.filter { $0 != "Done" }
    }

    func testCoalescingOnNameOnSenderBothAndNone() {
        let a = Sender()
        let b = Sender()
        let notes = [note(ping, a, 1), note(ping, b, 2), note(pong, a, 3), note(ping, a, 4), note(pong, nil, 5), note(pong, nil, 6)]
        XCTAssertEqual(coalesced(.onName, notes), ["Ping 1", "Pong 3"])
        XCTAssertEqual(coalesced(.onSender, notes), ["Ping 1", "Ping 2", "Pong 5"])
        XCTAssertEqual(coalesced([.onName, .onSender], notes), ["Ping 1", "Ping 2", "Pong 3", "Pong 5"])
        XCTAssertEqual(coalesced([], notes), ["Ping 1", "Ping 2", "Pong 3", "Ping 4", "Pong 5", "Pong 6"])
    }

    func testTheDefaultMaskIsNameAndSender() {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let a = Sender()
        queue.enqueue(note(ping, a, 1), postingStyle: .asap)
        queue.enqueue(note(ping, a, 2), postingStyle: .asap)
        queue.enqueue(note(ping, nil, 3), postingStyle: .asap)
        queue.enqueue(note(done), postingStyle: .asap)
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping 1", "Ping 3", "Done"])
    }

    func testIdleTimeNotificationsCoalesced() {
        // The seeds' scenario: many idle-time notifications for the same event in one pass post once.
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let sender = Sender()
        for round in 1...2 {
            loop.perform {
                for i in 1...50 { queue.enqueue(note(ping, sender, i), postingStyle: .whenIdle) }
                queue.enqueue(note(done), postingStyle: .whenIdle)
            }
            runUntilDone()
            XCTAssertEqual(log.value, ["Ping 1", "Done"], "round \(round)")
            log.value = []
        }
    }

    func testAnAsapDuplicateMakesTheQueuedIdleOnePostAsSoonAsAsap() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        queue.enqueue(note(ping, nil, 1), postingStyle: .whenIdle)
        queue.enqueue(note(ping, nil, 2), postingStyle: .asap)
        queue.enqueue(note(pong, nil, 3), postingStyle: .whenIdle)
        loop.run(mode: .default, for: .zero, returnAfterSourceHandled: false) // one pass, no idle point
        XCTAssertEqual(log.value, ["Ping 1"], "merged into the first (kept) one, which now posts as asap")
        queue.enqueue(note(done), postingStyle: .whenIdle)
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping 1", "Pong 3", "Done"])
    }

    // MARK: Dequeue

    func testDequeueRemovesMatchingQueuedNotifications() {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        let a = Sender()
        let b = Sender()
        queue.enqueue(note(ping, a, 1), postingStyle: .asap)
        queue.enqueue(note(ping, b, 2), postingStyle: .whenIdle)
        queue.enqueue(note(pong, a, 3), postingStyle: .asap)
        queue.enqueue(note(pong, b, 4), postingStyle: .whenIdle)
        queue.dequeueNotifications(matching: note(ping), coalesceMask: []) // matches nothing
        queue.dequeueNotifications(matching: note(ping, b), coalesceMask: [.onName, .onSender]) // Ping 2
        queue.dequeueNotifications(matching: note(pong, a), coalesceMask: .onSender) // Ping 1, Pong 3
        queue.enqueue(note(done), postingStyle: .whenIdle)
        runUntilDone()
        XCTAssertEqual(log.value, ["Pong 4", "Done"])
    }

    // MARK: Order

    func testNotificationsPostInTheOrderTheyWereEnqueued() {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        for i in 0..<100 { queue.enqueue(note(TKNotification.Name("n\(i)")), postingStyle: .asap) }
        for i in 100..<200 { queue.enqueue(note(TKNotification.Name("n\(i)")), postingStyle: .whenIdle) }
        queue.enqueue(note(done), postingStyle: .whenIdle)
        runUntilDone()
        XCTAssertEqual(log.value, (0..<200).map { "n\($0)" } + ["Done"])
    }

    // MARK: Modes

    func testQueuedNotificationsPostOnlyInTheirModes() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        keepRunnable(custom)
        queue.enqueue(note(ping), postingStyle: .asap, forModes: [custom])
        queue.enqueue(note(pong), postingStyle: .whenIdle, forModes: [custom])
        loop.run(mode: .default, for: .milliseconds(20), returnAfterSourceHandled: false) // passes and an idle point
        XCTAssertEqual(log.value, [], "nothing posts while the loop runs another mode")
        queue.enqueue(note(done), postingStyle: .whenIdle, forModes: [.default, custom])
        runUntilDone(custom)
        XCTAssertEqual(log.value, ["Ping", "Pong", "Done"])
    }

    func testADuplicateForAnotherModeMakesTheKeptOnePostThereToo() {
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        keepRunnable(.default)
        queue.enqueue(note(ping, nil, 1), postingStyle: .asap, forModes: [custom])
        queue.enqueue(note(ping, nil, 2), postingStyle: .asap, forModes: [.default])
        queue.enqueue(note(done), postingStyle: .asap)
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping 1", "Done"], "merged: the first one's contents, in either one's modes")
    }

    func testTheDefaultModeIsDefaultAndCommonFollowsTheLoopsCommonSet() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let queue = TKNotificationQueue(notificationCenter: loggingCenter(log))
        let tracking: TKRunLoop.Mode = "nq-tracking"
        keepRunnable(tracking)
        queue.enqueue(note(ping, nil, 1), postingStyle: .asap) // [.default]
        queue.enqueue(note(ping, nil, 2), postingStyle: .asap, coalesceMask: [], forModes: [.common])
        loop.run(mode: tracking, for: .milliseconds(10), returnAfterSourceHandled: false)
        XCTAssertEqual(log.value, [], "\(tracking) is not (yet) a common mode")
        loop.addCommonMode(tracking) // added after the notification was queued
        queue.enqueue(note(done), postingStyle: .asap, forModes: [.common])
        runUntilDone(tracking)
        XCTAssertEqual(log.value, ["Ping 2", "Done"], ".common now includes \(tracking); the default-mode one waits")
        keepRunnable(.default)
        queue.enqueue(note(done), postingStyle: .asap)
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping 2", "Done", "Ping 1", "Done"])
    }

    // MARK: Threads

    func testEnqueueFromOtherThreadsWakesTheOwnerAndLosesNothing() {
        let worker = LoopThread(name: "nq-owner")
        defer { worker.finish() }
        let center = TKNotificationCenter()
        let perThread = stress(2_000)
        let seen = Shared<[[Int]]>([[], []]) // owner thread only until `finished`
        let wrongThread = Atomic<Int>(0)
        let finished = Flag()
        let ownerTid = worker.thread.attributes.current.tid
        center.addObserver(forName: nil, object: nil) { note in
            if UInt32(KernelThread.currentID()) != ownerTid { wrongThread.wrappingAdd(1, ordering: .relaxed) }
            let (t, i) = (note.userInfo!["t"] as! Int, note.userInfo!["i"] as! Int)
            seen.value[t].append(i)
            if seen.value[0].count == perThread && seen.value[1].count == perThread { finished.set() }
        }
        let queueBox = Shared<TKNotificationQueue?>(nil)
        let created = DispatchSemaphore(value: 0)
        worker.loop.perform {
            queueBox.value = TKNotificationQueue(notificationCenter: center)
            created.signal()
        }
        XCTAssertEqual(created.wait(timeout: .now() + 30), .success)
        let queue = queueBox.value!
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting }, "the owner loop never slept")
        Workers.run(2) { t in
            for i in 0..<perThread {
                queue.enqueue(
                    TKNotification(name: ping, userInfo: ["t": t, "i": i]),
                    postingStyle: i.isMultiple(of: 2) ? .asap : .whenIdle, coalesceMask: [])
            }
        }
        XCTAssertTrue(finished.wait(until: .now + .seconds(60)), "not every notification was posted")
        XCTAssertEqual(wrongThread.load(ordering: .relaxed), 0, "queued notifications post on the owner thread")
        for t in 0..<2 {
            XCTAssertEqual(seen.value[t].count, perThread)
            XCTAssertEqual(Set(seen.value[t]).count, perThread, "each exactly once")
            let asap = seen.value[t].filter { $0.isMultiple(of: 2) }
            let idle = seen.value[t].filter { !$0.isMultiple(of: 2) }
            XCTAssertEqual(asap, asap.sorted(), "one thread's asap notifications post in its enqueue order")
            XCTAssertEqual(idle, idle.sorted(), "one thread's idle notifications post in its enqueue order")
        }
    }

    func testDefaultIsOnePerThreadAndPostsThroughTheDefaultCenter() {
        XCTAssertTrue(TKNotificationQueue.default === TKNotificationQueue.default)
        let other = Shared<TKNotificationQueue?>(nil)
        let t = TKThread { other.value = TKNotificationQueue.default }
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(30)))
        XCTAssertNotNil(other.value)
        XCTAssertTrue(other.value !== TKNotificationQueue.default)
        let name = TKNotification.Name("nq-default-\(UUID())")
        let posted = Shared(0)
        let token = TKNotificationCenter.default.addObserver(forName: name, object: nil) { _ in posted.value += 1 }
        defer { TKNotificationCenter.default.removeObserver(token) }
        TKNotificationQueue.default.enqueue(TKNotification(name: name), postingStyle: .now)
        XCTAssertEqual(posted.value, 1)
    }

    func testAQueueDroppedWithQueuedNotificationsStillPostsThem() {
        let log = Shared<[String]>([])
        let center = loggingCenter(log)
        keepRunnable(.default)
        weak var weakQueue: TKNotificationQueue?
        do {
            let queue = TKNotificationQueue(notificationCenter: center)
            weakQueue = queue
            queue.enqueue(note(ping), postingStyle: .whenIdle)
            queue.enqueue(note(done), postingStyle: .whenIdle)
        }
        XCTAssertNotNil(weakQueue, "what it holds keeps the queue alive")
        runUntilDone()
        XCTAssertEqual(log.value, ["Ping", "Done"])
        XCTAssertNil(weakQueue, "an empty queue nobody holds goes away")
        do {
            let queue = TKNotificationQueue(notificationCenter: center)
            weakQueue = queue
            queue.enqueue(note(ping), postingStyle: .asap)
            queue.dequeueNotifications(matching: note(ping), coalesceMask: .onName)
        }
        XCTAssertNil(weakQueue, "emptied by dequeue: nothing keeps it")
    }
}
