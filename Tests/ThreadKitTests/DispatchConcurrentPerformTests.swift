// TKDispatchQueue.concurrentPerform: every iteration exactly once, spread over workers, nested.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchConcurrentPerformTests: XCTestCase {
    func testEveryIterationRunsExactlyOnce() {
        for n in [0, 1, 2, 3, 17, 1_000, stress(1_000_000)] {
            let hits = UnsafeMutableBufferPointer<Atomic<UInt8>>.allocate(capacity: max(n, 1))
            for i in 0..<max(n, 1) { (hits.baseAddress! + i).initialize(to: Atomic(0)) }
            let box = Shared(hits)
            TKDispatchQueue.concurrentPerform(iterations: n) { i in box.value[i].wrappingAdd(1, ordering: .relaxed) }
            var wrong = 0
            for i in 0..<n where hits[i].load(ordering: .relaxed) != 1 { wrong += 1 }
            XCTAssertEqual(wrong, 0, "\(wrong) of \(n) iterations did not run exactly once")
            hits.deallocate()
        }
    }

    func testIterationsRunOnMoreThanOneThread() {
        let threads = Shared(Set<Int32>())
        let lock = NSLock()
        // Each iteration holds its thread until a second thread has taken part (or a generous
        // deadline passes), so a caller that gets through all 64 before a worker wakes on a
        // loaded machine cannot make this pass or fail by timing.
        let deadline = ContinuousClock.now + .seconds(30)
        TKDispatchQueue.concurrentPerform(iterations: 64) { _ in
            lock.lock(); threads.value.insert(KernelThread.currentID()); lock.unlock()
            while ContinuousClock.now < deadline {
                lock.lock(); let seen = threads.value.count; lock.unlock()
                if seen > 1 { break }
                sched_yield()
            }
        }
        XCTAssertGreaterThan(threads.value.count, 1)
    }

    func testNestedConcurrentPerform() {
        let n = 32
        let counter = Atomic<Int>(0)
        TKDispatchQueue.concurrentPerform(iterations: n) { _ in
            TKDispatchQueue.concurrentPerform(iterations: n) { _ in
                TKDispatchQueue.concurrentPerform(iterations: n) { _ in counter.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        XCTAssertEqual(counter.load(ordering: .relaxed), n * n * n)
    }

    func testCalledFromAQueueItem() {
        let queue = TKDispatchQueue(label: "apply-caller")
        let sum = queue.sync { () -> Int in
            let total = Atomic<Int>(0)
            TKDispatchQueue.concurrentPerform(iterations: 100) { i in total.wrappingAdd(i, ordering: .relaxed) }
            return total.load(ordering: .relaxed)
        }
        XCTAssertEqual(sum, 4_950)
    }
}
