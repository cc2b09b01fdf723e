// Lock-order checking stays cheap for good (docs/Diagnostics.md §1, bounds), judged by counting,
// never by timing: 10^5 short-lived locks nested in pairs leave the graph and the known-edge cache
// where they were (a freed lock's node and edges go), so a new pair's edge still enters the cache
// (the fast path) and a real inversion made afterwards is still reported; among more live locks
// than one search may visit, the search that would walk them all stops at its budget, is counted
// as truncated, and a cycle within reach is still found.
import Foundation
import XCTest

@testable import ThreadKit

final class DiagnosticsLockOrderBoundsTests: LockOrderTestCase {

    private func id(_ lock: TKLock) -> UInt32 { lock.label.orderID.load(ordering: .relaxed) }

    func testShortLivedLocksLeaveNoEdgesBehindAndNewPairsStillTakeTheFastPath() {
        let graphBefore = LockOrderGraph.shared.size
        let cachedBefore = LockOrderGraph.cachedEdgeCount
        // More pairs than the cache has slots (2^16): without forgetting, it fills for good.
        for _ in 0..<100_000 { Self.nest(TKLock(), TKLock()) }
        // Other tests' objects may come and go meanwhile (queues, pools): a little slack.
        let graphAfter = LockOrderGraph.shared.size
        let cachedAfter = LockOrderGraph.cachedEdgeCount
        XCTAssertLessThanOrEqual(graphAfter.locks, graphBefore.locks + 32, "locks left in the graph")
        XCTAssertLessThanOrEqual(graphAfter.edges, graphBefore.edges + 32, "orders left in the graph")
        XCTAssertLessThanOrEqual(cachedAfter, cachedBefore + 32, "edges left in the cache (before: \(cachedBefore))")

        let a = TKLock()
        let b = TKLock()
        a.name = "after-churn-a"
        b.name = "after-churn-b"
        Self.nest(a, b)
        XCTAssertTrue(LockOrderGraph.isCached(from: id(a), to: id(b)), "a new pair's edge must enter the cache")
        XCTAssertEqual(collector.lockOrderReports.count, 0)
        onNewThread { Self.nest(b, a) }
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1, "the inversion made after the churn must be reported")
        XCTAssertEqual(Set(reports.first?.locks ?? []), ["TKLock \"after-churn-a\"", "TKLock \"after-churn-b\""])
    }

    func testACycleSearchAmongManyLiveLocksStopsAtItsBudget() {
        let budget = LockOrderGraph.defaultSearchBudget
        XCTAssertEqual(LockOrderGraph.shared.searchBudget, budget)
        // A chain of live locks longer than one search may walk: chain[i] → chain[i + 1].
        let chain = (0..<budget + 100).map { _ in TKLock() }
        for i in 0..<chain.count - 1 { Self.nest(chain[i], chain[i + 1]) }
        let before = LockOrderGraph.shared.searchCounts

        // head → chain[0]: the search from chain[0] for a way back to head walks the chain.
        let head = TKLock()
        head.name = "head"
        Self.nest(head, chain[0])
        let after = LockOrderGraph.shared.searchCounts
        XCTAssertGreaterThanOrEqual(after.searches, before.searches + 1)
        XCTAssertEqual(after.truncated, before.truncated + 1, "the walk must be cut short and counted")
        XCTAssertLessThanOrEqual(after.mostSteps, budget, "no search may examine more edges than the budget")
        XCTAssertTrue(TKDiagnostics.summary.contains("truncated"), TKDiagnostics.summary)
        XCTAssertEqual(collector.lockOrderReports.count, 0, "a truncated search reports nothing")

        // chain[3] → head closes head → chain[0] … chain[3] → head: within reach, so reported.
        chain[3].name = "chain-3"
        onNewThread { Self.nest(chain[3], head) }
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1)
        XCTAssertEqual(reports.first?.locks.count, 5)
        XCTAssertTrue(reports.first?.locks.contains("TKLock \"head\"") == true, "\(reports.first?.locks ?? [])")
        XCTAssertLessThanOrEqual(LockOrderGraph.shared.searchCounts.mostSteps, budget)
    }
}
