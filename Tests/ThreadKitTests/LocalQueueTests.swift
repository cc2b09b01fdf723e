// LocalQueue, a pool worker's lock-free local queue (issue 48): single-threaded tests of every
// state the protocol has (FIFO, levels, batched marks, wrap-around, full, a claim held open while
// the owner pops and pushes, steal-half and steal-all, the LIFO slot and its limit), judged
// against what was pushed; and a stress test with an owner pushing (half of it through the LIFO
// slot) and popping and two thieves (one stealing halves, one taking everything), in which every
// value must be seen exactly once, judged by counting per value.
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

final class LocalQueueTests: XCTestCase {
    private let capacity = LocalQueue<Int>.capacity

    func testOwnerPushesAndPopsInOrderAcrossManyWrapArounds() {
        let q = LocalQueue<Int>()
        var next = 0
        var expected = 0
        // Uneven push and pop runs, so the contents wrap at every slot over time.
        for round in 0..<200 {
            for _ in 0..<(round % 7 + 3) {
                XCTAssertNotNil(q.acceptsPush(level: 4, unbatchedLimit: Int.max))
                q.push(next, level: 4)
                next += 1
            }
            for _ in 0..<(round % 5 + 3) {
                guard let (value, level, batched) = q.pop() else { break }
                XCTAssertEqual(value, expected)
                XCTAssertEqual(level, 4)
                XCTAssertFalse(batched)
                expected += 1
            }
        }
        while let (value, _, _) = q.pop() {
            XCTAssertEqual(value, expected)
            expected += 1
        }
        XCTAssertEqual(expected, next)
        XCTAssertGreaterThan(next, 4 * capacity)
        XCTAssertEqual(q.count, 0)
        XCTAssertEqual(q.ownerCount, 0)
    }

    func testPushIsRefusedWhenFullForAnotherLevelOrPastTheUnbatchedLimit() {
        let q = LocalQueue<Int>()
        XCTAssertEqual(q.acceptsPush(level: 2, unbatchedLimit: 3), 0)
        for i in 0..<3 { q.push(i, level: 2) }
        XCTAssertNil(q.acceptsPush(level: 2, unbatchedLimit: 3), "three unbatched jobs wait")
        XCTAssertEqual(q.acceptsPush(level: 2, unbatchedLimit: 4), 3)
        XCTAssertNil(q.acceptsPush(level: 3, unbatchedLimit: 100), "the queue holds level 2")
        while q.pop() != nil {}
        XCTAssertEqual(q.acceptsPush(level: 3, unbatchedLimit: 100), 0, "empty: any level")
        // A batch does not count against the unbatched limit.
        q.beginBatch(count: 5)
        for i in 0..<5 { q.push(i, level: 3) }
        XCTAssertEqual(q.acceptsPush(level: 3, unbatchedLimit: 1), 5)
        q.push(5, level: 3)
        XCTAssertNil(q.acceptsPush(level: 3, unbatchedLimit: 1))
        let marks = (0..<6).map { _ in q.pop()!.batched }
        XCTAssertEqual(marks, [true, true, true, true, true, false])
        // Full.
        for i in 0..<capacity { q.push(i, level: 3) }
        XCTAssertEqual(q.freeSlots, 0)
        XCTAssertNil(q.acceptsPush(level: 3, unbatchedLimit: Int.max))
        _ = q.pop()
        XCTAssertEqual(q.acceptsPush(level: 3, unbatchedLimit: Int.max), capacity - 1)
    }

    func testAClaimedSlotIsNotFreeUntilTheClaimIsReleased() {
        let q = LocalQueue<Int>()
        for i in 0..<capacity { q.push(i, level: 1) }
        guard let (first, n, word) = q.claim(all: false) else { return XCTFail("nothing claimed") }
        XCTAssertEqual(first, 0)
        XCTAssertEqual(Int(n), capacity / 2)
        // The owner pops past the claim, and sees none of the claimed entries.
        XCTAssertEqual(q.ownerCount, capacity / 2)
        var popped: [Int] = []
        while let (value, _, _) = q.pop() { popped.append(value) }
        XCTAssertEqual(popped, Array(capacity / 2..<capacity))
        // Its queue is empty, but no slot is free: the claimed ones would be overwritten first
        // (the steal head stays at the claim's start while it is in flight).
        XCTAssertEqual(q.ownerCount, 0)
        XCTAssertEqual(q.freeSlots, 0)
        XCTAssertNil(q.acceptsPush(level: 1, unbatchedLimit: Int.max))
        // A second claim while one is in flight takes nothing.
        XCTAssertNil(q.claim(all: true))
        let other = LocalQueue<Int>()
        XCTAssertNil(q.stealHalf(into: other))
        q.release(word)
        XCTAssertEqual(q.freeSlots, capacity)
        XCTAssertEqual(q.acceptsPush(level: 1, unbatchedLimit: Int.max), 0)
        q.push(1_000, level: 1)
        XCTAssertEqual(q.pop()?.0, 1_000)
        XCTAssertNil(q.pop())
    }

    func testStealHalfTakesTheOlderHalfWithItsLevelAndBatchedMarks() {
        let victim = LocalQueue<Int>()
        let thief = LocalQueue<Int>()
        // Three batched jobs, then two the owner's job submitted.
        victim.beginBatch(count: 3)
        for i in 0..<3 { victim.push(i, level: 6) }
        for i in 3..<5 { victim.push(i, level: 6) }
        guard let (first, level) = victim.stealHalf(into: thief) else { return XCTFail("nothing stolen") }
        XCTAssertEqual(first, 0)
        XCTAssertEqual(level, 6)
        var thiefs: [(Int, Int, Bool)] = []
        while let (v, l, b) = thief.pop() { thiefs.append((v, l, b)) }
        XCTAssertEqual(thiefs.map(\.0), [1, 2])
        XCTAssertEqual(thiefs.map(\.1), [6, 6])
        XCTAssertEqual(thiefs.map(\.2), [true, true])
        var victims: [(Int, Bool)] = []
        while let (v, _, b) = victim.pop() { victims.append((v, b)) }
        XCTAssertEqual(victims.map(\.0), [3, 4])
        XCTAssertEqual(victims.map(\.1), [false, false])

        // One batched job, three submitted: the thief's share (two) holds the batched one first.
        victim.beginBatch(count: 1)
        victim.push(10, level: 2)
        for i in 11..<14 { victim.push(i, level: 2) }
        XCTAssertEqual(victim.stealHalf(into: thief)?.0, 10)
        XCTAssertEqual(thief.pop().map { [$0.0, $0.batched ? 1 : 0] }, [11, 0])
        XCTAssertNil(thief.pop())
        XCTAssertEqual(victim.pop().map { [$0.0, $0.batched ? 1 : 0] }, [12, 0])
        // One left: stealing half of one takes it.
        XCTAssertEqual(victim.stealHalf(into: thief)?.0, 13)
        XCTAssertNil(victim.stealHalf(into: thief))
        XCTAssertNil(thief.pop())
    }

    func testStealAllTakesEverythingInOrderWithItsLevel() {
        let q = LocalQueue<Int>()
        let ring = JobRing<Int>(capacity: 4)
        XCTAssertNil(q.stealAll(into: ring))
        // Wrapped contents.
        for i in 0..<(capacity - 3) { q.push(i, level: 0) }
        while q.pop() != nil {}
        for i in 0..<10 { q.push(i, level: 5) }
        XCTAssertEqual(q.stealAll(into: ring), 5)
        XCTAssertEqual(q.count, 0)
        XCTAssertNil(q.pop())
        var taken: [Int] = []
        while let v = ring.popFirst() { taken.append(v) }
        XCTAssertEqual(taken, Array(0..<10))
        XCTAssertEqual(q.freeSlots, capacity)
    }

    /// The newest job runs first, three times in a row at most; then the ring's oldest goes first
    /// and the LIFO job waits behind the ring (tokio's limit).
    func testTheNewestJobRunsFirstAtMostThreeTimesInARow() {
        XCTAssertEqual(LocalQueue<Int>.lifoLimit, 3)
        let q = LocalQueue<Int>()
        var streak = 0
        var order: [Int] = []
        func pushNewest(_ v: Int) {
            XCTAssertNotNil(q.acceptsPush(level: 2, unbatchedLimit: Int.max))
            q.pushNewest(v, level: 2)
        }
        for v in 0..<5 { pushNewest(v) }
        XCTAssertEqual(q.count, 5)
        XCTAssertEqual(q.ownerCount, 5)
        // A job that runs submits the next: 4, then 5, then 6 run from the slot.
        for v in 5..<8 {
            let (value, level, batched) = q.popNext(lifoStreak: &streak)!
            XCTAssertEqual(level, 2)
            XCTAssertFalse(batched)
            order.append(value)
            pushNewest(v)
        }
        while let (value, _, _) = q.popNext(lifoStreak: &streak) { order.append(value) }
        XCTAssertEqual(order, [4, 5, 6, 0, 1, 2, 3, 7])
        XCTAssertEqual(q.count, 0)
        // Alone, the slot's job runs whatever the streak.
        streak = 3
        pushNewest(8)
        XCTAssertEqual(q.popNext(lifoStreak: &streak)?.0, 8)
        XCTAssertNil(q.popNext(lifoStreak: &streak))
    }

    /// The LIFO job counts for the push rules: its level is the queue's, and it is not batched.
    func testTheLIFOJobCountsForTheLevelAndTheUnbatchedLimit() {
        let q = LocalQueue<Int>()
        XCTAssertEqual(q.acceptsPush(level: 2, unbatchedLimit: 2), 0)
        q.pushNewest(0, level: 2)
        XCTAssertNil(q.acceptsPush(level: 3, unbatchedLimit: 100), "the slot holds level 2")
        XCTAssertEqual(q.acceptsPush(level: 2, unbatchedLimit: 2), 1, "one job before the next")
        q.pushNewest(1, level: 2)
        XCTAssertNil(q.acceptsPush(level: 2, unbatchedLimit: 2), "two unbatched jobs wait")
        XCTAssertEqual(q.acceptsPush(level: 2, unbatchedLimit: 3), 2)
        var streak = 0
        XCTAssertEqual(q.popNext(lifoStreak: &streak)?.0, 1)
        XCTAssertEqual(q.popNext(lifoStreak: &streak)?.0, 0)
        XCTAssertEqual(q.acceptsPush(level: 3, unbatchedLimit: 100), 0, "empty: any level")
    }

    /// An idle thief's steal-half leaves the LIFO job (a lone continuation waits for its worker),
    /// but a give-back's steal-all takes it, last, so a job that blocks or runs long never holds
    /// its continuation.
    func testStealHalfLeavesTheLIFOJobAndStealAllTakesItLast() {
        let victim = LocalQueue<Int>()
        let thief = LocalQueue<Int>()
        for v in 0..<4 {
            XCTAssertNotNil(victim.acceptsPush(level: 1, unbatchedLimit: Int.max))
            victim.pushNewest(v, level: 1)
        }
        XCTAssertEqual(victim.count, 4)
        let (first, level) = victim.stealHalf(into: thief)!
        XCTAssertEqual(first, 0)
        XCTAssertEqual(level, 1)
        XCTAssertEqual(thief.count, 1)
        XCTAssertEqual(victim.count, 2, "the ring's 2 and the slot's 3 are left")
        XCTAssertEqual(victim.stealHalf(into: LocalQueue<Int>())?.0, 2)
        XCTAssertNil(victim.stealHalf(into: LocalQueue<Int>()), "a lone LIFO job was stolen by an idle thief")
        XCTAssertEqual(victim.count, 1)
        let ring = JobRing<Int>(capacity: 4)
        XCTAssertEqual(victim.stealAll(into: ring), 1)
        XCTAssertEqual(ring.popFirst(), 3)
        XCTAssertEqual(victim.count, 0)
        for v in 4..<7 { victim.pushNewest(v, level: 1) }
        XCTAssertEqual(victim.stealAll(into: ring), 1)
        var taken: [Int] = []
        while let v = ring.popFirst() { taken.append(v) }
        XCTAssertEqual(taken, [4, 5, 6], "the ring's jobs in order, the slot's last")
        victim.pushNewest(7, level: 4)
        var streak = 0
        XCTAssertEqual(victim.popNext(lifoStreak: &streak)?.0, 7, "the slot is the owner's again")
    }

    /// The owner pushes 0..<total (popping one of every three pushes, and running what a full
    /// queue refuses itself); a thief steals halves into its own queue and pops them; another takes
    /// everything now and then. Every value must be seen exactly once.
    func testOwnerAndTwoThievesSeeEveryValueExactlyOnce() {
        final class Box: Sendable {
            let queue = LocalQueue<Int>()
            let done = Atomic<Bool>(false)
            let seen: Guarded<[Int]>
            init(total: Int) { seen = Guarded([Int](repeating: 0, count: total)) }
            func record(_ values: [Int]) { seen.withLock { for v in values { $0[v] += 1 } } }
        }
        let total = stress(1_000_000)
        let box = Box(total: total)
        Workers.run(3, timeout: 120) { index in
            var mine: [Int] = []
            mine.reserveCapacity(total)
            switch index {
            case 0:
                var lifoStreak = 0
                for v in 0..<total {
                    if box.queue.acceptsPush(level: 1, unbatchedLimit: Int.max) != nil {
                        if v % 2 == 0 { box.queue.push(v, level: 1) } else { box.queue.pushNewest(v, level: 1) }
                    } else {
                        mine.append(v)
                    }
                    if v % 3 == 0, let (value, _, _) = box.queue.popNext(lifoStreak: &lifoStreak) { mine.append(value) }
                }
                while let (value, _, _) = box.queue.popNext(lifoStreak: &lifoStreak) { mine.append(value) }
                box.done.store(true, ordering: .sequentiallyConsistent)
            case 1:
                let own = LocalQueue<Int>()
                while true {
                    let finished = box.done.load(ordering: .sequentiallyConsistent)
                    if let (value, _) = box.queue.stealHalf(into: own) {
                        mine.append(value)
                        while let (next, _, _) = own.pop() { mine.append(next) }
                    } else if finished {
                        break
                    }
                }
            default:
                let ring = JobRing<Int>(capacity: 16)
                var round = 0
                while true {
                    let finished = box.done.load(ordering: .sequentiallyConsistent)
                    round += 1
                    if round % 64 == 0 || finished, box.queue.stealAll(into: ring) != nil {
                        while let v = ring.popFirst() { mine.append(v) }
                    } else if finished {
                        break
                    }
                }
            }
            box.record(mine)
        }
        let seen = box.seen.withLock { $0 }
        let wrong = seen.indices.filter { seen[$0] != 1 }
        XCTAssertEqual(wrong.count, 0, "values not seen exactly once: \(wrong.prefix(10).map { ($0, seen[$0]) })")
        XCTAssertEqual(box.queue.count, 0)
    }
}
