import XCTest

// JobRing, the FIFO under the run queues, queues and port inboxes: `append(contentsOf:)` and
// `prepend(contentsOf:)` (the pool's stage drain and give-back) judged against Swift arrays doing
// the same, for every count and every position either ring's contents can wrap at: the smaller
// side moving either way, into an empty ring, a full one (growth) and one with room.
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

    /// Every staged, queued and batched dispatch entry moves through rings like these: its fields
    /// are ordered so it takes 32 bytes, not 40 (DispatchEntry's header).
    func testADispatchEntryIsThirtyTwoBytes() {
        XCTAssertEqual(MemoryLayout<DispatchEntry>.size, 32)
        XCTAssertEqual(MemoryLayout<DispatchEntry>.stride, 32)
    }
}
