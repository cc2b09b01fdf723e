import XCTest

// DeadlineHeap keys deadlines by their exact offset from an epoch in integer components
// (System/DeadlineHeap.swift). Judged against ContinuousClock.Instant's own comparison and
// Swift's sort, independently of the heap.
@testable import ThreadKit

final class DeadlineHeapTests: XCTestCase {
    /// Instants before and after the epoch, apart by attoseconds to hours, and as far as twice
    /// Int64.max seconds either way (the extreme-input cases' far past and far future): the keys
    /// order exactly as the instants do, and convert back to the very same instant.
    func testKeysOrderAndConvertBackExactly() {
        let base = DeadlineKey.epoch
        let huge = Duration.seconds(Int64.max)
        let offsets: [Duration] = [
            huge + huge, .zero - huge - huge, huge, .zero - huge,
            .zero, .nanoseconds(1), .nanoseconds(-1), .seconds(-1.5), .seconds(-1.2), .seconds(0.5),
            .seconds(-0.5), .milliseconds(3), .seconds(3_600), .seconds(-3_600),
            Duration(secondsComponent: 2, attosecondsComponent: 1),
            Duration(secondsComponent: 2, attosecondsComponent: 2),
            Duration(secondsComponent: -2, attosecondsComponent: -1),
        ]
        let instants = offsets.map { base + $0 }
        for a in instants {
            XCTAssertEqual(DeadlineKey(a).instant, a, "not exact")
            for b in instants {
                XCTAssertEqual(DeadlineKey(a) < DeadlineKey(b), a < b, "\(a) vs \(b)")
                XCTAssertEqual(DeadlineKey(a) == DeadlineKey(b), a == b, "\(a) vs \(b)")
            }
        }
    }

    /// 10,000 random deadlines (some equal) come out of the heap in deadline order, equal ones in
    /// push order, each with the deadline it was pushed with; popDue never returns a later one.
    func testPopsInDeadlineThenPushOrder() {
        var heap = DeadlineHeap<Int>()
        var generator = SystemRandomNumberGenerator()
        let base = ContinuousClock.now
        var pushed: [(ContinuousClock.Instant, Int)] = []
        for i in 0..<10_000 {
            let deadline = base + .nanoseconds(Int64.random(in: -5_000...5_000, using: &generator))
            heap.push(i, deadline: deadline)
            pushed.append((deadline, i))
        }
        let expected = pushed.enumerated().sorted { a, b in
            a.element.0 != b.element.0 ? a.element.0 < b.element.0 : a.offset < b.offset
        }.map { $0.element }
        let cut = base + .nanoseconds(1_000)
        let due = heap.popDue(cut)
        XCTAssertTrue(due.allSatisfy { $0.deadline <= cut })
        var popped = due.map { ($0.deadline, $0.payload) }
        while !heap.isEmpty {
            let entry = heap.pop()
            XCTAssertGreaterThan(entry.deadline, cut)
            popped.append((entry.deadline, entry.payload))
        }
        XCTAssertEqual(popped.map(\.1), expected.map(\.1))
        XCTAssertEqual(popped.map(\.0), expected.map(\.0))
    }
}
