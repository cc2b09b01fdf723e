// The AsyncSequences of docs/Concurrency.md §4: a port's `messages` (FIFO from another thread
// without a run loop, the delegate left out while an iteration is active and served again after,
// invalidation and cancellation ending the sequence), a timer's `fires` (never early, coalesced
// for a slow consumer, the timer invalidated when the iteration ends) and a center's
// `notifications` (post order, sender filter, the observer removed after break, cancellation,
// or when the sequence is dropped). Judged by message ids, the delegate's own record, the loop's
// timer list and the center's observer count.
import Dispatch
import Foundation
import XCTest

@testable import ThreadKit

final class AsyncSequenceTests: XCTestCase {
    // MARK: Port messages

    func testPortMessagesArriveInOrderFromAnotherThreadWithoutARunLoop() async {
        let port = TKMessagePort()
        let count = stress(10_000)
        var iterator = port.messages.makeAsyncIterator()
        XCTAssertEqual(port.inbox.consumerCount, 1)
        let sender = TestThread("sender") {
            for i in 0..<count { XCTAssertTrue(sendMessage(port, UInt32(i))) }
        }
        var expected: UInt32 = 0
        while Int(expected) < count {
            guard let message = await iterator.next() else {
                XCTFail("the sequence ended after \(expected) messages")
                break
            }
            if message.msgid != expected {
                XCTFail("message \(message.msgid) arrived when \(expected) was due")
                break
            }
            XCTAssertTrue(message.receivePort === port)
            expected += 1
        }
        XCTAssertTrue(sender.join())
        XCTAssertEqual(port.inbox.count, 0)
        _ = iterator
    }

    func testTheDelegateGetsNothingDuringAnIterationAndWhatIsLeftAfterIt() async {
        let worker = LoopThread()
        defer { worker.finish() }
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        worker.loop.add(port, forMode: .default)
        XCTAssertTrue(sendMessage(port, 1))
        XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success, "the delegate did not get the first message")
        do {
            var iterator = port.messages.makeAsyncIterator()
            for id: UInt32 in 2...5 { XCTAssertTrue(sendMessage(port, id)) }
            for id: UInt32 in 2...3 {
                let message = await iterator.next()
                XCTAssertEqual(message?.msgid, id)
            }
            XCTAssertEqual(collector.ids, [1], "the delegate got messages while an iteration was active")
            _ = iterator // dropped here: the iteration ends with 4 and 5 untaken
        }
        XCTAssertEqual(port.inbox.consumerCount, 0)
        for _ in 0..<2 { XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success, "left messages were lost") }
        XCTAssertEqual(collector.ids, [1, 4, 5])
    }

    func testInvalidatingThePortEndsTheSequence() async {
        let port = TKMessagePort()
        let task = Task { () -> [UInt32] in
            var ids: [UInt32] = []
            for await message in port.messages { ids.append(message.msgid) }
            return ids
        }
        XCTAssertTrue(sendMessage(port, 9))
        let waiting = await eventually { port.inbox.consumerWaiterCount == 1 && port.inbox.count == 0 }
        XCTAssertTrue(waiting, "the iteration never took the message and waited")
        port.invalidate()
        let ids = await outcome(of: task)
        XCTAssertEqual(ids, [9])
        XCTAssertEqual(port.inbox.consumerCount, 0)
        XCTAssertEqual(port.inbox.consumerWaiterCount, 0)
        // A new iteration of an invalid port ends at once.
        var iterator = port.messages.makeAsyncIterator()
        let next = await iterator.next()
        XCTAssertNil(next)
    }

    func testCancellingTheIterationEndsItAndTheDelegateIsServedAgain() async {
        let worker = LoopThread()
        defer { worker.finish() }
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        worker.loop.add(port, forMode: .default)
        let task = Task { () -> Int in
            var n = 0
            for await _ in port.messages { n += 1 }
            return n
        }
        let waiting = await eventually { port.inbox.consumerWaiterCount == 1 }
        XCTAssertTrue(waiting)
        task.cancel()
        let taken = await outcome(of: task)
        XCTAssertEqual(taken, 0)
        XCTAssertEqual(port.inbox.consumerCount, 0, "the consumer registration outlived the iteration")
        XCTAssertEqual(port.inbox.consumerWaiterCount, 0)
        XCTAssertTrue(sendMessage(port, 3))
        XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success, "the delegate was not served again")
        XCTAssertEqual(collector.ids, [3])
    }

    // MARK: Timer fires

    func testTimerFiresAreNeverEarlyAndTheTimerEndsWithTheIteration() async {
        let worker = LoopThread()
        defer { worker.finish() }
        let interval = Duration.milliseconds(10)
        let start = ContinuousClock.now
        let timer: TKTimer
        do {
            var iterator = TKTimer.fires(every: interval, on: worker.loop).makeAsyncIterator()
            timer = iterator.timer
            var previous = start
            for k in 1...5 {
                guard let fire = await iterator.next() else { return XCTFail("the sequence ended") }
                XCTAssertGreaterThanOrEqual(fire, start + interval * k, "fire \(k) came early")
                XCTAssertGreaterThan(fire, previous)
                previous = fire
            }
            XCTAssertTrue(timer.isValid)
            _ = iterator // dropped here
        }
        XCTAssertFalse(timer.isValid, "the timer outlived its iteration")
        XCTAssertNil(worker.loop.nextTimerFireDate(forMode: .default))
    }

    func testASlowConsumerGetsOnlyTheNewestMissedFire() async {
        let worker = LoopThread()
        defer { worker.finish() }
        let interval = Duration.milliseconds(5)
        var iterator = TKTimer.fires(every: interval, on: worker.loop).makeAsyncIterator()
        guard let first = await iterator.next() else { return XCTFail("no first fire") }
        // Wait (without taking) until the timer has fired at least three more times: its fire
        // date moves past a slot only after that slot's fire was yielded.
        let fired = await eventually { iterator.timer.fireDate >= first + interval * 4 }
        XCTAssertTrue(fired)
        XCTAssertEqual(iterator.lifetime.buffer.bufferedCount, 1, "missed fires were queued, not coalesced")
        guard let newest = await iterator.next() else { return XCTFail("no coalesced fire") }
        XCTAssertGreaterThanOrEqual(newest, first + interval * 3, "the buffered fire is not the newest")
    }

    func testCancellingTheIterationInvalidatesTheTimer() async {
        let worker = LoopThread()
        defer { worker.finish() }
        let loop = worker.loop
        let task = Task { () -> Int in
            var n = 0
            for await _ in TKTimer.fires(every: .seconds(3600), on: loop) { n += 1 }
            return n
        }
        let scheduled = await eventually { loop.nextTimerFireDate(forMode: .default) != nil }
        XCTAssertTrue(scheduled)
        task.cancel()
        let fires = await outcome(of: task)
        XCTAssertEqual(fires, 0)
        let removed = await eventually { loop.nextTimerFireDate(forMode: .default) == nil }
        XCTAssertTrue(removed, "the timer outlived the cancelled iteration")
    }

    // MARK: Notifications

    func testNotificationsArriveInPostOrderAndTheObserverGoesAfterBreak() async {
        let center = TKNotificationCenter()
        let name: TKNotification.Name = "tick"
        let count = stress(2_000)
        let sequence = center.notifications(named: name)
        XCTAssertEqual(center.observerCount, 1)
        let poster = TestThread("poster") {
            for i in 0..<count {
                center.post(name: "other", userInfo: ["i": -1])
                center.post(name: name, userInfo: ["i": i])
            }
        }
        var expected = 0
        for await notification in sequence {
            XCTAssertEqual(notification.name, name)
            let i = notification.userInfo?["i"] as? Int
            if i != expected {
                XCTFail("notification \(String(describing: i)) arrived when \(expected) was due")
                break
            }
            expected += 1
            if expected == count { break }
        }
        XCTAssertEqual(expected, count)
        XCTAssertTrue(poster.join())
        XCTAssertEqual(center.observerCount, 0, "the observer outlived the iteration")
        _ = sequence
    }

    func testNotificationsFilterBySenderAndKeepPostsMadeBeforeIterating() async {
        let center = TKNotificationCenter()
        final class Sender: Sendable {}
        let mine = Sender()
        let other = Sender()
        let sequence = center.notifications(named: "n", object: mine)
        center.post(name: "n", object: other, userInfo: ["i": 0])
        center.post(name: "n", object: mine, userInfo: ["i": 1])
        center.post(name: "n", object: other, userInfo: ["i": 2])
        center.post(name: "n", object: mine, userInfo: ["i": 3])
        var got: [Int] = []
        for await notification in sequence {
            XCTAssertTrue(notification.object === mine)
            got.append(notification.userInfo?["i"] as? Int ?? -1)
            if got.count == 2 { break }
        }
        XCTAssertEqual(got, [1, 3])
    }

    func testCancellingTheIterationRemovesTheObserver() async {
        let center = TKNotificationCenter()
        let task = Task { () -> Int in
            var n = 0
            for await _ in center.notifications(named: nil) { n += 1 }
            return n
        }
        let registered = await eventually { center.observerCount == 1 }
        XCTAssertTrue(registered)
        center.post(name: "any")
        task.cancel()
        let received = await outcome(of: task)
        XCTAssertNotNil(received)
        XCTAssertLessThanOrEqual(received ?? 0, 1)
        XCTAssertEqual(center.observerCount, 0, "the observer outlived the cancelled iteration")
    }

    func testDroppingTheSequenceWithoutIteratingRemovesTheObserver() {
        let center = TKNotificationCenter()
        do {
            let sequence = center.notifications(named: "n")
            XCTAssertEqual(center.observerCount, 1)
            center.post(name: "n")
            _ = sequence
        }
        XCTAssertEqual(center.observerCount, 0)
    }
}
