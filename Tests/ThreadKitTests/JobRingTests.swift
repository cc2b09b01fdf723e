import Glibc
import XCTest

// JobRing, the FIFO under the run queues, queues and port inboxes: `append(contentsOf:)` and
// `prepend(contentsOf:)` (the pool's stage drain and give-back) judged against Swift arrays doing
// the same, for every count and every position either ring's contents can wrap at: the smaller
// side moving either way, into an empty ring, a full one (growth) and one with room; and growth
// itself (doubling, eightfold past `JobRing.bulkCapacity`) wherever the contents wrap.
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

    /// Every staged, queued and batched dispatch entry moves through rings like these: its fields
    /// are ordered so it takes 32 bytes, not 40 (DispatchEntry's header).
    func testADispatchEntryIsThirtyTwoBytes() {
        XCTAssertEqual(MemoryLayout<DispatchEntry>.size, 32)
        XCTAssertEqual(MemoryLayout<DispatchEntry>.stride, 32)
    }
}
