// TKCondition: producer/consumer hand-offs, broadcast, deadlines, no remembered signals.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class ConditionTests: XCTestCase {
    func testProducerConsumerDeliversEveryItemOnceInOrder() {
        let condition = TKCondition()
        let queue = Shared<[Int]>([]) // guarded by condition
        let received = Shared<[Int]>([]) // consumer-owned until joined
        let count = stress(200_000)
        let consumer = Workers.start {
            var got: [Int] = []
            got.reserveCapacity(count)
            while got.count < count {
                condition.lock()
                while queue.value.isEmpty { condition.wait() }
                got.append(contentsOf: queue.value)
                queue.value.removeAll(keepingCapacity: true)
                condition.unlock()
            }
            received.value = got
        }
        for item in 0..<count {
            condition.lock()
            queue.value.append(item)
            condition.signal()
            condition.unlock()
        }
        XCTAssertEqual(consumer.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(received.value.count, count)
        XCTAssertTrue(received.value.elementsEqual(0..<count), "items lost, duplicated or out of order")
    }

    func testPingPongHandsTheTurnBackAndForth() {
        // 2×10^5 hand-offs where each side waits for its turn: every signal must be seen.
        let condition = TKCondition()
        let turn = Shared(0) // guarded by condition: whose turn, 0 or 1
        let rounds = stress(100_000)
        Workers.run(2) { me in
            for _ in 0..<rounds {
                condition.lock()
                while turn.value != me { condition.wait() }
                turn.value = 1 - me
                condition.signal()
                condition.unlock()
            }
        }
        XCTAssertEqual(turn.value, 0)
    }

    func testBroadcastReleasesTenWaiters() {
        let condition = TKCondition()
        let go = Shared(false) // guarded by condition
        let waiting = Shared(0) // guarded by condition
        let released = JudgedCounter()
        let waiters = (0..<10).map { _ in
            Workers.start {
                condition.lock()
                waiting.value += 1
                while !go.value { condition.wait() }
                condition.unlock()
                released.add()
            }
        }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) { condition.withLock { waiting.value == 10 } }, "timed out waiting until 10 threads wait")
        condition.lock()
        go.value = true
        condition.broadcast()
        condition.unlock()
        for w in waiters { XCTAssertEqual(w.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(released.count, 10)
    }

    func testWaitUntilTimesOutNeverEarlyAndHoldsTheLockAgain() {
        let condition = TKCondition()
        condition.lock()
        for ms in [1, 15, 60] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            var timedOut = false
            while !timedOut { timedOut = !condition.wait(until: deadline) }
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "wait(until:) timed out before its deadline")
        }
        // Still held by us: unlock() from a thread that does not hold it would stop the process.
        condition.unlock()
    }

    func testWaitUntilReturnsTrueWhenSignalled() {
        let condition = TKCondition()
        let flag = Shared(false) // guarded by condition
        condition.lock()
        let signaller = Workers.start {
            condition.lock()
            flag.value = true
            condition.signal()
            condition.unlock()
        }
        var signalled = true
        while !flag.value && signalled { signalled = condition.wait(until: .now + .seconds(30)) }
        XCTAssertTrue(flag.value)
        condition.unlock()
        XCTAssertEqual(signaller.wait(timeout: .now() + 30), .success)
    }
}
