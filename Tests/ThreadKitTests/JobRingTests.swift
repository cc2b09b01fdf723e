import Glibc
import XCTest

// JobRing, the FIFO under the run queues, queues and port inboxes: `append(contentsOf:)` and
// `prepend(contentsOf:)` (the pool's stage drain and give-back) judged against Swift arrays doing
// the same, for every count and every position either ring's contents can wrap at: the smaller
// side moving either way, into an empty ring, a full one (growth) and one with room; and growth
// itself (doubling, eightfold past `JobRing.bulkCapacity`) wherever the contents wrap; and
// `settle`'s rule for giving a burst's buffer back (issue 49), with times passed by hand.
// Deterministic, no threads.
@testable import ThreadKit

final class JobRingTests: XCTestCase {
    /// A ring of `capacity` whose `count` elements (from `first` on) start at slot `head`.
    private func ring(capacity: Int, head: Int, count: Int, first: Int) -> JobRing<Int> {
        let ring = JobRing<Int>(capacity: capacity)
        // Push and pop `head` fillers so the contents start at that slot.
        for _ in 0..<head { ring.append(-1) }
        for _ in 0..<head { _ = ring.popFirst() }
        for i in 0..<count { ring.append(first + i) }
        return ring
    }

    private func drain(_ ring: JobRing<Int>) -> [Int] {
        var out: [Int] = []
        while let x = ring.popFirst() { out.append(x) }
        return out
    }

    func testAppendingARingMovesEveryElementInOrderWhereverEitherWraps() {
        let capacity = 8
        var cases = 0
        for ownCount in 0...capacity {
            for ownHead in 0..<capacity {
                for otherCount in 0...capacity {
                    for otherHead in 0..<capacity {
                        for atFront in [false, true] {
                            let own = ring(capacity: capacity, head: ownHead, count: ownCount, first: 0)
                            let other = ring(capacity: capacity, head: otherHead, count: otherCount, first: 1_000)
                            let mine = Array(0..<ownCount)
                            let theirs = Array(1_000..<1_000 + otherCount)
                            if atFront { own.prepend(contentsOf: other) } else { own.append(contentsOf: other) }
                            let expected = atFront ? theirs + mine : mine + theirs
                            XCTAssertEqual(own.count, expected.count)
                            XCTAssertTrue(other.isEmpty)
                            XCTAssertEqual(
                                drain(own), expected,
                                "\(atFront ? "prepend" : "append"): own \(ownCount)@\(ownHead), other \(otherCount)@\(otherHead)")
                            // Both rings still work as FIFOs afterwards (indices and buffers intact).
                            for i in 0..<20 {
                                own.append(i)
                                other.append(i)
                            }
                            XCTAssertEqual(drain(own), Array(0..<20))
                            XCTAssertEqual(drain(other), Array(0..<20))
                            cases += 1
                        }
                    }
                }
            }
        }
        XCTAssertEqual(cases, 2 * 9 * 8 * 9 * 8)
    }

    func testRingsOfDifferentCapacitiesGrowAsOftenAsNeeded() {
        for (ownCount, otherCount) in [(3, 60), (60, 3)] {
            for atFront in [false, true] {
                let own = ring(capacity: ownCount < 8 ? 4 : 64, head: 3, count: ownCount, first: 0)
                let other = ring(capacity: otherCount < 8 ? 4 : 64, head: 50 % (otherCount < 8 ? 4 : 64), count: otherCount, first: 100)
                if atFront { own.prepend(contentsOf: other) } else { own.append(contentsOf: other) }
                let mine = Array(0..<ownCount)
                let theirs = Array(100..<100 + otherCount)
                XCTAssertEqual(drain(own), atFront ? theirs + mine : mine + theirs)
                XCTAssertTrue(other.isEmpty)
            }
        }
    }

    /// Elements with an owner: the move must neither copy nor drop a reference.
    func testAppendingMovesReferencesWithoutLeakingOrDroppingThem() {
        final class Token {}
        weak var watched: Token?
        do {
            let own = JobRing<Token>(capacity: 4)
            let other = JobRing<Token>(capacity: 4)
            own.append(Token())
            let token = Token()
            watched = token
            other.append(token)
            other.append(Token())
            own.append(contentsOf: other)
            XCTAssertEqual(own.count, 3)
            _ = own.popFirst()
            XCTAssertTrue(own.popFirst() === watched)
        }
        XCTAssertNil(watched)
    }

    /// Growth moves the contents in two bulk runs (head to end, then the wrapped rest), doubling up
    /// to `bulkCapacity` and eightfold beyond: for every position the contents can wrap at when
    /// the ring fills, in both regimes, the FIFO order survives and the ring keeps working.
    func testGrowingKeepsTheOrderWhereverTheContentsWrapInBothRegimes() {
        for capacity in [8, JobRing<Int>.bulkCapacity] {
            for head in stride(from: 0, to: capacity, by: max(1, capacity / 16)) + [capacity - 1] {
                let full = ring(capacity: capacity, head: head, count: capacity, first: 0)
                full.append(capacity) // the one that grows it
                XCTAssertEqual(full.count, capacity + 1)
                for i in (capacity + 1)..<(capacity * 3) { full.append(i) } // past the new size at 8: grows again
                XCTAssertEqual(drain(full), Array(0..<(capacity * 3)), "capacity \(capacity), head \(head)")
                for i in 0..<10 { full.append(i) }
                XCTAssertEqual(drain(full), Array(0..<10))
            }
        }
    }

    /// Growing (and the head's return to the front of an emptied ring) moves references: no copy
    /// is left behind and none is dropped. Judged by the elements' own deinits, counted under a
    /// mutex, not by the ring.
    func testGrowingPastTheBulkCapacityNeitherLeaksNorDropsAReference() {
        final class Counter: @unchecked Sendable {
            private var lock = pthread_mutex_t()
            private var value = 0
            init() { pthread_mutex_init(&lock, nil) }
            func add() {
                pthread_mutex_lock(&lock)
                value += 1
                pthread_mutex_unlock(&lock)
            }
            var current: Int {
                pthread_mutex_lock(&lock)
                defer { pthread_mutex_unlock(&lock) }
                return value
            }
        }
        final class Token {
            let id: Int
            let freed: Counter
            init(_ id: Int, _ freed: Counter) { (self.id, self.freed) = (id, freed) }
            deinit { freed.add() }
        }
        let freed = Counter()
        let n = JobRing<Token>.bulkCapacity * 9 // through one eightfold step and into the next
        do {
            let ring = JobRing<Token>(capacity: 16)
            for i in 0..<100 { ring.append(Token(-i, freed)) }
            for _ in 0..<100 { _ = ring.popFirst() } // emptied: back to the front of its buffer
            XCTAssertEqual(freed.current, 100)
            for i in 0..<n {
                ring.append(Token(i, freed))
                if i % 3 == 0 { XCTAssertEqual(ring.popFirst()?.id, i / 3) } // the head moves: wraps
            }
            XCTAssertEqual(freed.current, 100 + (n + 2) / 3)
            var next = (n + 2) / 3
            while let token = ring.popFirst() {
                XCTAssertEqual(token.id, next)
                next += 1
            }
            XCTAssertEqual(next, n)
        }
        XCTAssertEqual(freed.current, 100 + n)
    }

    // MARK: Giving a burst's buffer back (`settle`)

    private let second = JobRing<Int>.quietNanoseconds

    /// A ring of base 16 that held `burst` elements and was emptied again.
    private func burstRing(_ burst: Int, base: Int = 16) -> JobRing<Int> {
        let ring = JobRing<Int>(capacity: base)
        for i in 0..<burst { ring.append(i) }
        XCTAssertEqual(drain(ring), Array(0..<burst))
        return ring
    }

    func testABurstsBufferGoesBackAQuietSecondAfterTheLastLookThatFoundItNeeded() {
        let ring = burstRing(5_000) // past 4,096: 32,768
        XCTAssertEqual(ring.currentCapacity, 32_768)
        XCTAssertTrue(ring.isOversized)
        let t0: UInt64 = 7_000_000_000
        XCTAssertFalse(ring.settle(now: t0), "just needed: kept")
        XCTAssertFalse(ring.settle(now: t0 + second - 1), "quiet for less than a second: kept")
        XCTAssertEqual(ring.currentCapacity, 32_768)
        XCTAssertTrue(ring.settle(now: t0 + second), "quiet for a second and empty: given back")
        XCTAssertEqual(ring.currentCapacity, 16)
        XCTAssertFalse(ring.isOversized)
        XCTAssertFalse(ring.settle(now: t0 + 10 * second), "nothing more to give back")
        // Still a FIFO, growing again as needed.
        for i in 0..<40_000 { ring.append(i) }
        XCTAssertEqual(ring.currentCapacity, 262_144)
        XCTAssertEqual(drain(ring), Array(0..<40_000))
    }

    /// The hysteresis: a flood that fills more than an eighth of the buffer (more than the size
    /// below would hold) between two looks keeps it however long it lasts; once the rounds are
    /// small, the buffer goes a quiet second after the last large one.
    func testAFloodKeepsItsBufferAndSmallRoundsLetItGoAfterAQuietSecond() {
        let ring = burstRing(5_000)
        var now: UInt64 = 1_000
        for round in 0..<50 { // 50 rounds, 0.3 s apart: 15 s of flood
            for i in 0..<4_097 { ring.append(i) } // one more than an eighth of 32,768
            XCTAssertEqual(drain(ring).count, 4_097)
            XCTAssertFalse(ring.settle(now: now), "round \(round)")
            XCTAssertEqual(ring.currentCapacity, 32_768, "round \(round): never freed and regrown")
            now += second * 3 / 10
        }
        let lastNeeded = now - second * 3 / 10
        while now < lastNeeded + second { // small rounds: 4,096 (an eighth) is not a need
            for i in 0..<4_096 { ring.append(i) }
            XCTAssertEqual(drain(ring).count, 4_096)
            XCTAssertFalse(ring.settle(now: now))
            now += second / 10
        }
        XCTAssertTrue(ring.settle(now: lastNeeded + second))
        XCTAssertEqual(ring.currentCapacity, 16)
    }

    /// A look with elements in the ring never frees it (the quiet second may have passed): the
    /// first look that finds it empty does, and the elements all come out in order meanwhile.
    func testARingIsGivenBackOnlyWhenEmpty() {
        let ring = burstRing(5_000)
        XCTAssertFalse(ring.settle(now: 10))
        for i in 0..<3 { ring.append(i) }
        XCTAssertFalse(ring.settle(now: 10 + 5 * second), "three elements in it")
        XCTAssertEqual(ring.currentCapacity, 32_768)
        XCTAssertEqual(drain(ring), [0, 1, 2])
        XCTAssertTrue(ring.settle(now: 10 + 5 * second))
        XCTAssertEqual(ring.currentCapacity, 16)
    }

    /// Buffers up to `retainedCapacity` (or the ring's base, if larger) are kept for good.
    func testBuffersUpToTheRetainedCapacityOrTheBaseAreKept() {
        let ring = burstRing(JobRing<Int>.retainedCapacity)
        XCTAssertEqual(ring.currentCapacity, JobRing<Int>.retainedCapacity)
        XCTAssertFalse(ring.isOversized)
        XCTAssertFalse(ring.settle(now: 1))
        XCTAssertFalse(ring.settle(now: 100 * second))
        XCTAssertEqual(ring.currentCapacity, JobRing<Int>.retainedCapacity)
        let big = JobRing<Int>(capacity: 65_536)
        XCTAssertFalse(big.isOversized)
        XCTAssertFalse(big.settle(now: 100 * second))
        XCTAssertEqual(big.currentCapacity, 65_536)
    }

    /// What `settle` knows of a buffer moves with it when rings swap buffers (the stage's
    /// rotation), and a ring shrinks back to its own base, not the other's.
    func testSwappedBuffersCarryTheirHistoryAndEachRingShrinksToItsOwnBase() {
        let burst = burstRing(5_000, base: 16)
        XCTAssertFalse(burst.settle(now: 100)) // needed at 100
        let spare = JobRing<Int>(capacity: 64)
        spare.swapContents(with: burst)
        XCTAssertEqual(spare.currentCapacity, 32_768)
        XCTAssertEqual(burst.currentCapacity, 64)
        XCTAssertFalse(burst.isOversized)
        XCTAssertFalse(spare.settle(now: 100 + second - 1), "needed at 100, which moved with the buffer")
        XCTAssertTrue(spare.settle(now: 100 + second))
        XCTAssertEqual(spare.currentCapacity, 64)
        // A buffer filled, then swapped away full: its fill counts where it lands.
        let shard = JobRing<Int>(capacity: 16)
        for i in 0..<5_000 { shard.append(i) }
        XCTAssertFalse(shard.settle(now: 0)) // needed at 0, with 5,000 in it
        let level = JobRing<Int>(capacity: 64)
        level.swapContents(with: shard)
        XCTAssertEqual(drain(level).count, 5_000)
        XCTAssertFalse(level.settle(now: 10 * second), "it held 5,000 at the last look: needed now")
        XCTAssertTrue(level.settle(now: 11 * second))
    }

    /// `keepingBuffers`: the other ring's elements move in whatever the counts, so a small ring
    /// (a worker's local queue) never leaves with a large one's buffer; without it, the smaller
    /// side moves and the buffers change hands.
    func testJoiningWhileKeepingBuffersNeverHandsTheLargeBufferOver() {
        for atFront in [false, true] {
            let level = burstRing(5_000, base: 64)
            level.append(-1)
            let local = JobRing<Int>(capacity: 32)
            for i in 0..<20 { local.append(i) }
            if atFront {
                level.prepend(contentsOf: local, keepingBuffers: true)
            } else {
                level.append(contentsOf: local, keepingBuffers: true)
            }
            XCTAssertEqual(level.currentCapacity, 32_768)
            XCTAssertEqual(local.currentCapacity, 32)
            XCTAssertTrue(local.isEmpty)
            XCTAssertEqual(drain(level), atFront ? Array(0..<20) + [-1] : [-1] + Array(0..<20))
            // Without it: the level's one element moves into the local's buffer, and they swap.
            let other = burstRing(5_000, base: 64)
            other.append(-1)
            for i in 0..<20 { local.append(i) }
            other.append(contentsOf: local)
            XCTAssertEqual(other.currentCapacity, 32)
            XCTAssertEqual(local.currentCapacity, 32_768)
            XCTAssertEqual(drain(other), [-1] + Array(0..<20))
        }
    }

    /// Every staged, queued and batched dispatch entry moves through rings like these: its fields
    /// are ordered so it takes 32 bytes, not 40 (DispatchEntry's header).
    func testADispatchEntryIsThirtyTwoBytes() {
        XCTAssertEqual(MemoryLayout<DispatchEntry>.size, 32)
        XCTAssertEqual(MemoryLayout<DispatchEntry>.stride, 32)
    }
}
