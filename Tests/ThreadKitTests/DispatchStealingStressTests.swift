// Scheduler stress (issue 12): 10^6 items (scaled by TK_STRESS) from 8 producer threads at once into
// one global queue and 1,000 serial queues, with some items submitting follow-ups from pool
// workers (the submissions a worker makes itself, which a scheduler may keep on that worker and
// others steal). Exact counts by independent judges (a pthread-mutex counter, Foundation's
// DispatchGroup) and per-queue FIFO: each serial queue has one producer, whose items carry their
// index.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchStealingStressTests: XCTestCase {
    func testAMillionItemsFromEightProducersIntoAGlobalQueueAndAThousandSerialQueues() {
        let producers = 8
        let queueCount = 1_000
        let total = stress(1_000_000)
        let perProducer = total / producers
        let queues = (0..<queueCount).map {
            TKDispatchQueue(label: "steal\($0)", qos: [.utility, .default, .userInitiated, .default][$0 % 4])
        }
        // Slot q: the last index run on queue q, touched only by queue q's items (serial).
        let lastSeen = UnsafeMutableBufferPointer<Int>.allocate(capacity: queueCount)
        lastSeen.initialize(repeating: -1)
        defer { lastSeen.deallocate() }
        let slots = Shared(lastSeen)
        let outOfOrder = Atomic<Int>(0)
        let globalRuns = JudgedCounter()
        let serialRuns = JudgedCounter()
        let followUps = JudgedCounter()
        let judge = DispatchGroup()
        let global = TKDispatchQueue.global()
        let threads = TestThread.spawn(producers, "producer") { p in
            // Producer p owns queues p, p + 8, …: one producer per queue, so its order is the queue's.
            let owned = Array(stride(from: p, to: queueCount, by: producers))
            var sent = Array(repeating: 0, count: owned.count)
            for i in 0..<perProducer {
                judge.enter()
                if i % 2 == 0 {
                    let spawnsFollowUp = i % 32 == 0
                    if spawnsFollowUp { judge.enter() }
                    global.async {
                        globalRuns.add()
                        if spawnsFollowUp {
                            // Submitted from a pool worker.
                            global.async {
                                followUps.add()
                                judge.leave()
                            }
                        }
                        judge.leave()
                    }
                } else {
                    let k = (i / 2) % owned.count
                    let q = owned[k]
                    let index = sent[k]
                    sent[k] += 1
                    queues[q].async {
                        if slots.value[q] != index - 1 { outOfOrder.wrappingAdd(1, ordering: .relaxed) }
                        slots.value[q] = index
                        serialRuns.add()
                        judge.leave()
                    }
                }
            }
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)))
        XCTAssertEqual(judge.wait(timeout: .now() + 120), .success)
        let globalSent = producers * ((perProducer + 1) / 2)
        XCTAssertEqual(globalRuns.count, globalSent)
        XCTAssertEqual(serialRuns.count, producers * perProducer - globalSent)
        XCTAssertEqual(followUps.count, producers * ((perProducer + 31) / 32))
        XCTAssertEqual(outOfOrder.load(ordering: .relaxed), 0)
        // Every item ran exactly once: the per-queue indices end where the producers stopped.
        var lastIndexSum = 0
        for q in 0..<queueCount { lastIndexSum += slots.value[q] + 1 }
        XCTAssertEqual(lastIndexSum, serialRuns.count)
    }
}
