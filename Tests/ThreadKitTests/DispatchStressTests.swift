// Dispatch stress (RELIABILITY.md §4–5), sizes scaled by TK_STRESS: 10^6 asyncs counted exactly by
// an independent judge, 10^6 blocks across 1,000 queues in per-queue FIFO order, 10^6 hops between
// two serial queues, a barrier every 100 blocks never overlapping, sync storms on one queue.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchStressTests: XCTestCase {
    func testAMillionAsyncsToAGlobalQueueAreCountedExactly() {
        let n = stress(1_000_000)
        let counter = JudgedCounter()
        let judge = DispatchGroup() // Foundation's group: independent of ThreadKit
        judge.enter()
        let remaining = Atomic<Int>(n)
        for _ in 0..<n {
            TKDispatchQueue.global().async {
                counter.add()
                if remaining.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 { judge.leave() }
            }
        }
        XCTAssertEqual(judge.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(counter.count, n)
    }

    func testAMillionBlocksAcrossAThousandQueuesKeepPerQueueOrder() {
        let queueCount = 1_000
        let perQueue = stress(1_000)
        let queues = (0..<queueCount).map { TKDispatchQueue(label: "q\($0)", qos: [.utility, .default, .userInitiated][$0 % 3]) }
        let lastSeen = UnsafeMutableBufferPointer<Int>.allocate(capacity: queueCount) // slot q: queue q only
        lastSeen.initialize(repeating: -1)
        defer { lastSeen.deallocate() }
        let slots = Shared(lastSeen)
        let outOfOrder = Atomic<Int>(0)
        let counter = JudgedCounter()
        let judge = DispatchGroup()
        judge.enter()
        let remaining = Atomic<Int>(queueCount * perQueue)
        let submitters = TestThread.spawn(2, "submitter") { part in
            for i in 0..<perQueue {
                for q in stride(from: part, to: queueCount, by: 2) {
                    queues[q].async {
                        if slots.value[q] != i - 1 { outOfOrder.wrappingAdd(1, ordering: .relaxed) }
                        slots.value[q] = i
                        counter.add()
                        if remaining.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 { judge.leave() }
                    }
                }
            }
        }
        XCTAssertTrue(joinAll(submitters, until: .now + .seconds(120)))
        XCTAssertEqual(judge.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(counter.count, queueCount * perQueue)
        XCTAssertEqual(outOfOrder.load(ordering: .relaxed), 0)
    }

    func testPingPongBetweenTwoSerialQueues() {
        let hops = stress(1_000_000)
        let a = TKDispatchQueue(label: "ping")
        let b = TKDispatchQueue(label: "pong")
        let count = Shared(0) // touched by exactly one hop at a time
        let done = DispatchSemaphore(value: 0)
        @Sendable func hop(_ onA: Bool) {
            count.value += 1
            if count.value == hops {
                done.signal()
                return
            }
            (onA ? b : a).async { hop(!onA) }
        }
        a.async { hop(true) }
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(count.value, hops)
    }

    func testABarrierEveryHundredBlocksNeverOverlaps() {
        let queue = TKDispatchQueue(label: "barriers", attributes: .concurrent)
        let readers = Atomic<Int>(0)
        let writers = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        let n = stress(100_000)
        let group = TKDispatchGroup()
        for i in 0..<n {
            if i % 100 == 99 {
                queue.async(group: group, flags: .barrier) {
                    if writers.wrappingAdd(1, ordering: .relaxed).newValue != 1 || readers.load(ordering: .relaxed) != 0 {
                        violations.wrappingAdd(1, ordering: .relaxed)
                    }
                    writers.wrappingSubtract(1, ordering: .relaxed)
                }
            } else {
                queue.async(group: group) {
                    readers.wrappingAdd(1, ordering: .relaxed)
                    if writers.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
                    readers.wrappingSubtract(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertEqual(group.wait(until: .now + .seconds(120)), .success)
        XCTAssertEqual(violations.load(ordering: .relaxed), 0)
    }

    func testSyncAndAsyncFromManyThreadsOntoOneSerialQueue() {
        let queue = TKDispatchQueue(label: "storm")
        let inside = Atomic<Int>(0)
        let overlap = Atomic<Int>(0)
        let value = Shared(0)
        let n = stress(20_000)
        let threads = TestThread.spawn(4, "storm") { t in
            for i in 0..<n {
                let body: @Sendable () -> Void = {
                    if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlap.wrappingAdd(1, ordering: .relaxed) }
                    value.value += 1
                    inside.wrappingSubtract(1, ordering: .relaxed)
                }
                if (i + t) % 2 == 0 { queue.sync(execute: body) } else { queue.async(execute: body) }
            }
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)))
        XCTAssertEqual(queue.sync { value.value }, 4 * n)
        XCTAssertEqual(overlap.load(ordering: .relaxed), 0)
    }

    func testCreatingAndCancellingManyDescriptorSourcesLeaksNoDescriptor() {
        func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pair), 0)
        defer {
            close(pair[0])
            close(pair[1])
        }
        _ = TKDispatchSource.makeUserDataAddSource(queue: .global()) // the manager exists before counting
        let before = openDescriptors()
        for _ in 0..<stress(2_000) {
            let source = TKDispatchSource.makeReadSource(fileDescriptor: pair[0], queue: .global())
            source.setEventHandler {}
            source.activate()
            source.cancel()
        }
        XCTAssertLessThanOrEqual(openDescriptors(), before + 3, "the manager's epoll/eventfd/timerfd at most")
    }
}
