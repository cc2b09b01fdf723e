// TKDispatchGroup: wait returns when the count reaches zero, wait with a deadline is never early,
// notify runs once per zero crossing on the given queue, async(group:) enters and leaves.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchGroupTests: XCTestCase {
    func testWaitOnAnEmptyGroupReturnsAtOnce() {
        let group = TKDispatchGroup()
        group.wait()
        XCTAssertEqual(group.wait(until: .now), .success)
    }

    func testWaitReturnsAfterEveryBlockOfTheGroupFinished() {
        let group = TKDispatchGroup()
        let queue = TKDispatchQueue(label: "work", attributes: .concurrent)
        let counter = JudgedCounter()
        for _ in 0..<1_000 { queue.async(group: group) { counter.add() } }
        XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success)
        XCTAssertEqual(counter.count, 1_000)
    }

    func testTimedWaitIsNeverEarly() {
        let group = TKDispatchGroup()
        group.enter()
        for ms in [1, 5, 20] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            XCTAssertEqual(group.wait(until: deadline), .timedOut)
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        }
        group.leave()
        XCTAssertEqual(group.wait(until: .now + .seconds(1)), .success)
    }

    func testNotifyRunsOnceOnTheQueueWhenTheCountReachesZero() {
        let group = TKDispatchGroup()
        let queue = TKDispatchQueue(label: "notified")
        let key = TKDispatchSpecificKey<String>()
        queue.setSpecific(key: key, value: "notified")
        let ran = Atomic<Int>(0)
        let seen = Shared<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        group.enter()
        group.notify(queue: queue) {
            seen.value = TKDispatchQueue.getSpecific(key: key)
            ran.wrappingAdd(1, ordering: .relaxed)
            done.signal()
        }
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        group.leave()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(seen.value, "notified")
        group.enter()
        group.leave()
        queue.sync {}
        XCTAssertEqual(ran.load(ordering: .relaxed), 1, "a notification runs once")
    }

    func testNotifyOnAnEmptyGroupRunsAtOnce() {
        let group = TKDispatchGroup()
        let done = DispatchSemaphore(value: 0)
        group.notify(queue: .global()) { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testManyNotificationsEachRunExactlyOnce() {
        let n = stress(200_000)
        let counter = JudgedCounter()
        let all = DispatchGroup()
        let queue = TKDispatchQueue(label: "notify-stress", attributes: .concurrent)
        let batch = 1_000
        var submitted = 0
        while submitted < n {
            let group = TKDispatchGroup()
            group.enter()
            for _ in 0..<min(batch, n - submitted) {
                all.enter()
                group.notify(queue: queue) {
                    counter.add()
                    all.leave()
                }
            }
            submitted += min(batch, n - submitted)
            queue.async { group.leave() }
        }
        XCTAssertEqual(all.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(counter.count, n)
    }

    /// A group holds itself while its count is above zero (blocks of `async(group:)` hold it
    /// unretained, as libdispatch's do): dropped by its owner with blocks out, it lives until the
    /// last of them leaves, notifies, and is freed then.
    func testAGroupDroppedWhileItsBlocksAreOutLivesUntilTheLastLeaves() {
        let queue = TKDispatchQueue(label: "dropped-group", attributes: .concurrent)
        let gate = DispatchSemaphore(value: 0)
        let ran = DispatchGroup()
        let notified = DispatchSemaphore(value: 0)
        let counter = JudgedCounter()
        weak var weakGroup: TKDispatchGroup?
        do {
            let group = TKDispatchGroup()
            weakGroup = group
            for _ in 0..<8 {
                ran.enter()
                queue.async(group: group) {
                    gate.wait()
                    counter.add()
                    ran.leave()
                }
            }
            group.notify(queue: queue) { notified.signal() }
        }
        XCTAssertNotNil(weakGroup, "a group with blocks out holds itself")
        for _ in 0..<8 { gate.signal() }
        XCTAssertEqual(ran.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(notified.wait(timeout: .now() + 30), .success, "the dropped group notified at zero")
        XCTAssertEqual(counter.count, 8)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { weakGroup == nil }, "the group is freed after the last leave")
    }

    /// Many zero crossings, each taking and dropping the self-reference, from blocks on many
    /// workers and a thread entering and leaving by hand: the group ends at zero, waitable, freed.
    func testSelfReferenceAcrossManyZeroCrossingsIsBalanced() {
        weak var weakGroup: TKDispatchGroup?
        let counter = JudgedCounter()
        let rounds = stress(2_000)
        do {
            let group = TKDispatchGroup()
            weakGroup = group
            let queue = TKDispatchQueue.global()
            let byHand = TestThread {
                for _ in 0..<rounds {
                    group.enter()
                    group.leave()
                }
            }
            for round in 0..<rounds {
                queue.async(group: group) { counter.add() }
                // Every third round waits for zero (a crossing per wait, with the blocks of the
                // two rounds between run side by side): deterministic, so a failure replays.
                if round % 3 == 2 { XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success) }
            }
            XCTAssertTrue(byHand.join())
            XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success)
        }
        XCTAssertEqual(counter.count, rounds)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { weakGroup == nil }, "the group is freed once at zero and dropped")
    }

    func testEnterLeaveRacesFromManyThreadsEndAtZero() {
        let group = TKDispatchGroup()
        let threads = TestThread.spawn(4, "enter-leave") { _ in
            for _ in 0..<stress(100_000) {
                group.enter()
                group.leave()
            }
        }
        XCTAssertTrue(joinAll(threads))
        XCTAssertEqual(group.wait(until: .now + .seconds(1)), .success)
    }

    func testWaitersWakeWhenTheLastLeaveComesFromAnotherThread() {
        for _ in 0..<stress(500) {
            let group = TKDispatchGroup()
            group.enter()
            let waiter = TestThread { group.wait() }
            let leaver = TestThread { group.leave() }
            XCTAssertTrue(waiter.join())
            XCTAssertTrue(leaver.join())
        }
    }
}
