// TKDispatchQueue.concurrentPerform: every iteration exactly once, spread over workers, nested; with
// a QoS or a queue (dispatch_apply's queue argument) the iterations run at that level / on that
// queue, and on a serial queue in order, one at a time.
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
            lock.lock()
            threads.value.insert(KernelThread.currentID())
            lock.unlock()
            while ContinuousClock.now < deadline {
                lock.lock()
                let seen = threads.value.count
                lock.unlock()
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

    // MARK: With a QoS or a queue

    /// Marks each global queue with its QoS under `key` (removed by the returned closure).
    private func markGlobals(_ key: TKDispatchSpecificKey<String>) -> () -> Void {
        let globals: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]
        for qos in globals { TKDispatchQueue.global(qos: qos).setSpecific(key: key, value: "\(qos)") }
        return { for qos in globals { TKDispatchQueue.global(qos: qos).setSpecific(key: key, value: nil) } }
    }

    /// Runs 64 iterations through `apply` and returns the `key` values that iterations on helper
    /// threads (not the caller's) saw. Each iteration is held until a helper has taken part, so
    /// there is something to judge (a helper that arrives after the last claim claims nothing).
    private func specificsSeenByHelpers(
        _ key: TKDispatchSpecificKey<String>,
        _ apply: (@Sendable (Int) -> Void) -> Void
    ) -> [String?] {
        let caller = KernelThread.currentID()
        let seen = Shared<[String?]>([])
        let lock = NSLock()
        let hits = Atomic<Int>(0)
        let deadline = ContinuousClock.now + .seconds(30)
        apply { _ in
            hits.wrappingAdd(1, ordering: .relaxed)
            if KernelThread.currentID() != caller {
                lock.lock()
                seen.value.append(TKDispatchQueue.getSpecific(key: key))
                lock.unlock()
            }
            while ContinuousClock.now < deadline {
                lock.lock()
                let any = !seen.value.isEmpty
                lock.unlock()
                if any { break }
                sched_yield()
            }
        }
        XCTAssertEqual(hits.load(ordering: .relaxed), 64)
        XCTAssertFalse(seen.value.isEmpty, "no helper took part")
        return seen.value
    }

    func testWithAQoSTheHelpersRunOnThatGlobalQueue() {
        let key = TKDispatchSpecificKey<String>()
        let unmark = markGlobals(key)
        defer { unmark() }
        for qos in [TKQualityOfService.utility, .userInitiated, .background] {
            let seen = specificsSeenByHelpers(key) { TKDispatchQueue.concurrentPerform(iterations: 64, qos: qos, execute: $0) }
            XCTAssertEqual(Set(seen), ["\(qos)"], "helpers ran elsewhere than the \(qos) global queue")
        }
    }

    func testWithAGlobalQueueTheHelpersRunOnIt() {
        let key = TKDispatchSpecificKey<String>()
        let unmark = markGlobals(key)
        defer { unmark() }
        let seen = specificsSeenByHelpers(key) {
            TKDispatchQueue.concurrentPerform(iterations: 64, queue: .global(priority: .low), execute: $0)
        }
        XCTAssertEqual(Set(seen), ["utility"])
    }

    func testOnACustomConcurrentQueueEveryIterationRunsOnThatQueueAtItsLevel() {
        let key = TKDispatchSpecificKey<String>()
        let unmark = markGlobals(key)
        defer { unmark() }
        let queueKey = TKDispatchSpecificKey<Int>()
        let queue = TKDispatchQueue(label: "apply-concurrent", qos: .utility, attributes: .concurrent)
        queue.setSpecific(key: queueKey, value: 7)
        let n = 200
        let hits = UnsafeMutableBufferPointer<Atomic<UInt8>>.allocate(capacity: n)
        for i in 0..<n { (hits.baseAddress! + i).initialize(to: Atomic(0)) }
        defer { hits.deallocate() }
        let box = Shared(hits)
        let offQueue = Atomic<Int>(0)
        let wrongLevel = Atomic<Int>(0)
        TKDispatchQueue.concurrentPerform(iterations: n, queue: queue) { i in
            box.value[i].wrappingAdd(1, ordering: .relaxed)
            if TKDispatchQueue.getSpecific(key: queueKey) != 7 { offQueue.wrappingAdd(1, ordering: .relaxed) }
            if TKDispatchQueue.getSpecific(key: key) != "utility" { wrongLevel.wrappingAdd(1, ordering: .relaxed) }
        }
        var wrong = 0
        for i in 0..<n where hits[i].load(ordering: .relaxed) != 1 { wrong += 1 }
        XCTAssertEqual(wrong, 0, "\(wrong) of \(n) iterations did not run exactly once")
        XCTAssertEqual(offQueue.load(ordering: .relaxed), 0, "iterations ran outside the queue")
        XCTAssertEqual(wrongLevel.load(ordering: .relaxed), 0, "iterations ran elsewhere than the queue's global queue")
    }

    func testOnASerialQueueIterationsRunInOrderOneAtATimeOnThatQueue() {
        let queueKey = TKDispatchSpecificKey<Int>()
        let queue = TKDispatchQueue(label: "apply-serial")
        queue.setSpecific(key: queueKey, value: 3)
        let order = Shared<[Int]>([])
        let inside = Atomic<Int>(0)
        let overlap = Atomic<Int>(0)
        let offQueue = Atomic<Int>(0)
        TKDispatchQueue.concurrentPerform(iterations: 100, queue: queue) { i in
            if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlap.wrappingAdd(1, ordering: .relaxed) }
            if TKDispatchQueue.getSpecific(key: queueKey) != 3 { offQueue.wrappingAdd(1, ordering: .relaxed) }
            order.value.append(i) // one at a time (checked by `overlap`)
            inside.wrappingSubtract(1, ordering: .relaxed)
        }
        XCTAssertEqual(order.value, Array(0..<100))
        XCTAssertEqual(overlap.load(ordering: .relaxed), 0)
        XCTAssertEqual(offQueue.load(ordering: .relaxed), 0)
        TKDispatchQueue.concurrentPerform(iterations: 0, queue: queue) { _ in XCTFail("ran an iteration of none") }
    }
}
