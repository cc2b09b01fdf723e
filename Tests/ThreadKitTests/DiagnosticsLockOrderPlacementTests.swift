// A new lock-order edge costs what its search must visit, not the number of live locks (docs/
// Diagnostics.md §1; issue 49: with 100,000 live locks each new edge cost 13.2 ms under the graph's
// mutex, its search walking the budget's 16,384 edges). Judged by counting, never by timing:
//   - among a chain of live locks longer than a search's budget, edges that follow the chain's
//     order need no search at all, and an inversion of a few links is found by a search that
//     examines those links only;
//   - random edges among locks made and freed in random order are reported exactly when they
//     close a cycle, as decided by a breadth-first search over the test's own copy of the edges,
//     and the graph's positions stay consistent (every ordered edge climbs).
import Foundation
import XCTest

@testable import ThreadKit

final class DiagnosticsLockOrderPlacementTests: LockOrderTestCase {

    func testEdgesThatFollowTheOrderNeedNoSearchAmongManyLiveLocks() {
        let budget = LockOrderGraph.defaultSearchBudget
        let chain = (0..<budget + 4_000).map { _ in TKLock() }
        for i in 0..<chain.count - 1 { Self.nest(chain[i], chain[i + 1]) }
        let before = LockOrderGraph.shared.searchCounts

        // 200 forward edges chain[i] → chain[j], i + 1 < j: a search from chain[j] for a way back
        // would walk the rest of the chain (past the budget for most); the order rules it out.
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let i = Int.random(in: 1_000..<chain.count - 2, using: &rng)
            let j = Int.random(in: i + 2..<chain.count, using: &rng)
            Self.nest(chain[i], chain[j])
        }
        let after = LockOrderGraph.shared.searchCounts
        XCTAssertEqual(after.searches, before.searches, "an edge that follows the order needs no search")
        XCTAssertGreaterThanOrEqual(after.skipped, before.skipped + 200)
        XCTAssertEqual(after.truncated, before.truncated)
        XCTAssertEqual(collector.lockOrderReports.count, 0)

        // chain[105] → chain[100] closes chain[100] … chain[105]: the search from chain[100] may
        // only climb to chain[105]'s position, so it examines those five links (and nothing of the
        // other 20,000 locks).
        for i in 100...105 { chain[i].name = "link-\(i)" }
        onNewThread { Self.nest(chain[105], chain[100]) }
        let found = LockOrderGraph.shared.searchCounts
        XCTAssertEqual(found.searches, after.searches + 1)
        XCTAssertLessThanOrEqual(found.lastSteps, 5, "the search must stay within the cycle's positions")
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1)
        XCTAssertEqual(Set(reports.first?.locks ?? []), Set((100...105).map { "TKLock \"link-\($0)\"" }))
        XCTAssertTrue(LockOrderGraph.shared.isOrderConsistent)
    }

    func testRandomEdgesAreReportedExactlyWhenTheyCloseACycle() {
        var rng = SystemRandomNumberGenerator()
        var locks: [TKLock] = (0..<60).map { _ in TKLock() }
        // The test's own copy of the edges, by object identity.
        var model: [ObjectIdentifier: Set<ObjectIdentifier>] = [:]
        func reaches(_ start: TKLock, _ goal: TKLock) -> Bool {
            var seen: Set<ObjectIdentifier> = [ObjectIdentifier(start)]
            var queue = [ObjectIdentifier(start)]
            while let next = queue.popLast() {
                if next == ObjectIdentifier(goal) { return true }
                for target in model[next] ?? [] where seen.insert(target).inserted { queue.append(target) }
            }
            return false
        }
        var expected = 0
        var edgesAdded = 0
        let truncatedBefore = LockOrderGraph.shared.searchCounts.truncated
        for round in 0..<3_000 {
            if round % 10 == 9 {
                // Free one lock (its edges go) and make another, so positions and slots churn.
                let victim = locks.remove(at: Int.random(in: 0..<locks.count, using: &rng))
                let id = ObjectIdentifier(victim)
                model[id] = nil
                for key in model.keys { model[key]?.remove(id) }
                locks.insert(TKLock(), at: Int.random(in: 0...locks.count, using: &rng))
                continue
            }
            let a = locks[Int.random(in: 0..<locks.count, using: &rng)]
            let b = locks[Int.random(in: 0..<locks.count, using: &rng)]
            guard a !== b, model[ObjectIdentifier(a)]?.contains(ObjectIdentifier(b)) != true else { continue }
            if reaches(b, a) { expected += 1 }
            model[ObjectIdentifier(a), default: []].insert(ObjectIdentifier(b))
            edgesAdded += 1
            Self.nest(a, b)
            XCTAssertEqual(collector.lockOrderReports.count, expected, "after edge \(edgesAdded)")
            if collector.lockOrderReports.count != expected { break }
        }
        XCTAssertGreaterThan(expected, 0, "the random edges closed no cycle: the test tested nothing")
        XCTAssertTrue(LockOrderGraph.shared.isOrderConsistent)
        XCTAssertEqual(LockOrderGraph.shared.searchCounts.truncated, truncatedBefore, "no search may be cut short here")
    }
}
