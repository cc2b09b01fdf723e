// TKConditionLock: the seed's HAS_DATA/NO_DATA producer/consumer, waiting for specific values,
// deadlines, tryLock variants. (Foundation's NSConditionLock on Linux crashes when it has to
// wait; every test here makes threads wait.)
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class ConditionLockTests: XCTestCase {
    let NO_DATA = 0, HAS_DATA = 1

    func testProducerConsumerWithHasDataAndNoData() {
        let condLock = TKConditionLock(condition: NO_DATA)
        let queue = Shared<[Int]>([]) // guarded by condLock
        let received = Shared<[Int]>([]) // consumer-owned until joined
        let count = stress(100_000)
        let (noData, hasData) = (NO_DATA, HAS_DATA)
        let consumer = Workers.start {
            var got: [Int] = []
            while got.count < count {
                condLock.lock(whenCondition: hasData)
                got.append(queue.value.removeFirst())
                condLock.unlock(withCondition: queue.value.isEmpty ? noData : hasData)
            }
            received.value = got
        }
        for item in 0..<count {
            condLock.lock()
            queue.value.append(item)
            condLock.unlock(withCondition: hasData)
        }
        XCTAssertEqual(consumer.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(received.value.elementsEqual(0..<count), "items lost, duplicated or out of order")
        XCTAssertEqual(condLock.condition, NO_DATA)
    }

    func testWaitersForDifferentValuesRunInTheChainedOrder() {
        // Threads 1...5 each wait for condition == its number and pass to the next: the chain can
        // only complete if unlock(withCondition:) wakes the right waiter each time.
        let lock = TKConditionLock(condition: 0)
        let order = Shared<[Int]>([]) // guarded by lock
        let threads = (1...5).reversed().map { n in
            Workers.start {
                lock.lock(whenCondition: n)
                order.value.append(n)
                lock.unlock(withCondition: n + 1)
            }
        }
        lock.lock()
        lock.unlock(withCondition: 1)
        for t in threads { XCTAssertEqual(t.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(order.value, [1, 2, 3, 4, 5])
        XCTAssertEqual(lock.condition, 6)
    }

    func testLockWhenConditionBeforeTimesOutNeverEarlyWithoutHoldingTheLock() {
        let lock = TKConditionLock(condition: 0)
        for ms in [1, 20, 80] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            XCTAssertFalse(lock.lock(whenCondition: 7, before: deadline))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "returned before the deadline")
        }
        // Not held after the time-out: tryLock succeeds on this thread.
        XCTAssertTrue(lock.tryLock())
        lock.unlock()
    }

    func testLockBeforeTimesOutWhileAnotherThreadHoldsIt() {
        let lock = TKConditionLock(condition: 3)
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = Workers.start {
            lock.lock()
            held.signal()
            release.wait()
            lock.unlock()
        }
        held.wait()
        let deadline = ContinuousClock.now + .milliseconds(30)
        XCTAssertFalse(lock.lock(before: deadline))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        XCTAssertFalse(lock.tryLock())
        XCTAssertFalse(lock.tryLock(whenCondition: 3))
        release.signal()
        XCTAssertEqual(holder.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(lock.lock(whenCondition: 3, before: .now + .seconds(30)))
        lock.unlock()
    }

    func testTryLockWhenConditionChecksTheValue() {
        let lock = TKConditionLock(condition: 2)
        XCTAssertFalse(lock.tryLock(whenCondition: 1))
        XCTAssertTrue(lock.tryLock(whenCondition: 2))
        lock.unlock(withCondition: 5)
        XCTAssertEqual(lock.condition, 5)
        XCTAssertTrue(lock.tryLock())
        lock.unlock() // plain unlock keeps the condition
        XCTAssertEqual(lock.condition, 5)
    }

    func testLockWhenConditionWaitsForAValueSetLater() {
        let lock = TKConditionLock(condition: 0)
        let got = Atomic<Bool>(false)
        let waiter = Workers.start {
            got.store(lock.lock(whenCondition: 9, before: .now + .seconds(30)), ordering: .relaxed)
            lock.unlock()
        }
        lock.lock()
        lock.unlock(withCondition: 9)
        XCTAssertEqual(waiter.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(got.load(ordering: .relaxed))
    }
}
