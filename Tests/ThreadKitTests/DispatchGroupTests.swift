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
