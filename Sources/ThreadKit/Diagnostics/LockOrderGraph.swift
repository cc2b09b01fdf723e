// LockOrderGraph: the lock-order graph behind LockOrder (docs/Diagnostics.md §1). Nodes are lock
// ids, an edge A → B means "some thread acquired B while holding A". Everything here is guarded
// by `mutex` (a RawMutex leaf: nothing else is locked while it is held, and no user lock is taken
// under it, so it is outside the user-visible order). Only new edges and lock creation/destruction
// reach it; known edges are answered by the C cache without it. The cache's writers (insert and
// remove) run only under `mutex`, which is what serialises them (CThreadKitLockOrder.h).
//
// Bounds: a freed lock's node and edges leave the graph and the cache (LockName's deinit), so
// short-lived locks leave nothing behind; a cycle search examines at most `searchBudget` edges,
// so one new edge among very many live locks costs a bounded time under the mutex. A search that
// runs out is counted (`truncatedSearches`, in the summary) and said once on stderr: a cycle
// through that edge may go unreported; it is never reported falsely.
import CThreadKit

final class LockOrderGraph: @unchecked Sendable {
    static let shared = LockOrderGraph()

    /// Edges one cycle search may examine before it gives up (the default of `searchBudget`).
    static let defaultSearchBudget = 16_384

    private struct Node {
        let kind: StaticString
        weak var lock: LockName?
        /// The name when the node was last described, kept for reports that outlive the lock.
        var lastName: String?
    }

    struct Edge {
        let stack: CallStack
        let thread: LockOrderThread
    }

    /// What the searches did, for the summary and tests.
    struct SearchCounts: Equatable {
        /// Cycle searches made (one per new edge).
        var searches = 0
        /// Searches that ran out of budget before they were done.
        var truncated = 0
        /// Edges the last search examined.
        var lastSteps = 0
        /// The most edges any search examined.
        var mostSteps = 0
    }

    private let mutex = RawMutex()
    private var nodes: [UInt32: Node] = [:] // guarded by mutex
    private var outgoing: [UInt32: [UInt32: Edge]] = [:] // guarded by mutex
    private var incoming: [UInt32: Set<UInt32>] = [:] // guarded by mutex
    private var reported: Set<[UInt32]> = [] // guarded by mutex: cycles, smallest id first
    private(set) var reports: [TKLockOrderReport] = [] // guarded by mutex (read via `allReports`)
    private var counts = SearchCounts() // guarded by mutex
    private var budget = LockOrderGraph.defaultSearchBudget // guarded by mutex
    private var truncationSaid = false // guarded by mutex

    func addNode(_ id: UInt32, kind: StaticString, lock: LockName) {
        mutex.withLock { nodes[id] = Node(kind: kind, lock: lock) }
    }

    /// The lock of `id` was freed: its node and edges go, from the graph and from the C cache
    /// (its id is never reused).
    func removeNode(_ id: UInt32) {
        mutex.withLock {
            nodes[id] = nil
            if let edges = outgoing.removeValue(forKey: id) {
                for to in edges.keys {
                    incoming[to]?.remove(id)
                    if incoming[to]?.isEmpty == true { incoming[to] = nil }
                    _ = tk_lockorder_edge_remove(id, to)
                }
            }
            for from in incoming.removeValue(forKey: id) ?? [] {
                outgoing[from]?[id] = nil
                if outgoing[from]?.isEmpty == true { outgoing[from] = nil }
                _ = tk_lockorder_edge_remove(from, id)
            }
        }
    }

    /// Of the edges `held[i] → to`, those the graph lacks (both locks alive). Those it has are put
    /// back into the C cache (an insert that found the probe window full earlier may succeed now).
    /// Lets the slow path skip capturing a stack when the cache only missed an edge.
    func missingEdges(from held: [UInt32], to: UInt32) -> [UInt32] {
        mutex.withLock {
            guard nodes[to] != nil else { return [] }
            return held.filter { from in
                guard nodes[from] != nil else { return false }
                if outgoing[from]?[to] == nil { return true }
                _ = tk_lockorder_edge_insert(from, to)
                return false
            }
        }
    }

    /// Adds `from → to` if new and returns the report of the cycle it closes, if any and not
    /// reported before. The edge enters the C cache (under the mutex) only after the graph has it,
    /// so a thread that finds it cached never skips a cycle search that has not happened.
    func addEdge(from: UInt32, to: UInt32, stack: CallStack, thread: LockOrderThread) -> TKLockOrderReport? {
        // The cycle's locks are described after the mutex is released: reading a weak LockName
        // makes a strong reference, and if that is the last one, the LockName's deinit (which
        // takes this mutex) must not run under it.
        var truncation: String?
        let found: (cycle: [UInt32], nodes: [(StaticString, LockName?)], edges: [Edge])? = mutex.withLock {
            guard nodes[from] != nil, nodes[to] != nil else { return nil }
            guard outgoing[from]?[to] == nil else {
                _ = tk_lockorder_edge_insert(from, to)
                return nil
            }
            outgoing[from, default: [:]][to] = Edge(stack: stack, thread: thread)
            incoming[to, default: []].insert(from)
            _ = tk_lockorder_edge_insert(from, to)
            let search = pathLocked(from: to, to: from)
            if search.truncated && !truncationSaid {
                truncationSaid = true
                truncation =
                    "ThreadKit lock order: a cycle search gave up after \(search.steps) steps (\(nodes.count) locks, "
                    + "\(edgeCountLocked) orders in the graph): cycles through some orders may go unreported. "
                    + "Fix: free locks that are no longer used; the order of many thousands of live locks is not checked in full."
            }
            guard let path = search.path else { return nil }
            // path: to … from; with the new edge from → to it closes the cycle.
            let cycle = [from] + path.dropLast()
            let key = canonical(cycle)
            guard !reported.contains(key) else { return nil }
            reported.insert(key)
            let described = cycle.map { (nodes[$0]?.kind ?? "lock", nodes[$0]?.lock) }
            let edges = cycle.indices.compactMap { outgoing[cycle[$0]]?[cycle[($0 + 1) % cycle.count]] }
            return (cycle, described, edges)
        }
        if let truncation, DiagnosticsState.shared.read(\.prints) { TKDiagnostics.printError(truncation) }
        guard let found else { return nil }
        let names = zip(found.cycle, found.nodes).map { id, node in
            node.1?.name.map { "\(node.0) \"\($0)\"" } ?? "\(node.0) #\(id)"
        }
        let edges = found.edges.indices.map { i in
            TKLockOrderReport.Edge(
                held: names[i], acquired: names[(i + 1) % names.count],
                thread: found.edges[i].thread.description, stack: found.edges[i].stack)
        }
        let report = TKLockOrderReport(locks: names, edges: edges)
        mutex.withLock { reports.append(report) }
        return report
    }

    var allReports: [TKLockOrderReport] { mutex.withLock { reports } }

    /// Forgets the reports (not the graph): for tests and `TKDiagnostics.reset`.
    func forgetReports() {
        mutex.withLock {
            reports.removeAll()
            reported.removeAll()
        }
    }

    /// Nodes and edges now in the graph (for the summary).
    var size: (locks: Int, edges: Int) {
        mutex.withLock { (nodes.count, edgeCountLocked) }
    }

    private var edgeCountLocked: Int { outgoing.values.reduce(0) { $0 + $1.count } }

    /// What the cycle searches did so far.
    var searchCounts: SearchCounts { mutex.withLock { counts } }

    /// Edges one search may examine (tests lower it; at least 1).
    var searchBudget: Int {
        get { mutex.withLock { budget } }
        set { mutex.withLock { budget = max(1, newValue) } }
    }

    /// Edges the C cache holds now (tests, the summary).
    static var cachedEdgeCount: Int { Int(tk_lockorder_edge_count()) }

    /// Whether the C cache holds `from → to`: an acquisition in that order takes the fast path.
    static func isCached(from: UInt32, to: UInt32) -> Bool { tk_lockorder_edge_known(from, to) != 0 }

    // MARK: Search and report (mutex held)

    /// A path start … goal over the edges, found depth first, or nil; `truncated` when the budget
    /// ran out first (then `path` is nil). `steps`: edges examined.
    private func pathLocked(from start: UInt32, to goal: UInt32) -> (path: [UInt32]?, truncated: Bool, steps: Int) {
        var visited: Set<UInt32> = [start]
        var path: [UInt32] = [start]
        var iterators: [Dictionary<UInt32, Edge>.Keys.Iterator] = [(outgoing[start] ?? [:]).keys.makeIterator()]
        var steps = 0
        defer {
            counts.searches += 1
            counts.lastSteps = steps
            counts.mostSteps = max(counts.mostSteps, steps)
        }
        while !iterators.isEmpty {
            guard let next = iterators[iterators.count - 1].next() else {
                iterators.removeLast()
                path.removeLast()
                continue
            }
            if steps == budget {
                counts.truncated += 1
                return (nil, true, steps)
            }
            steps += 1
            if next == goal { return (path + [goal], false, steps) }
            guard visited.insert(next).inserted, nodes[next] != nil else { continue }
            path.append(next)
            iterators.append((outgoing[next] ?? [:]).keys.makeIterator())
        }
        return (nil, false, steps)
    }

    /// The cycle rotated to start at its smallest id: the same cycle found from any edge matches.
    private func canonical(_ cycle: [UInt32]) -> [UInt32] {
        guard let low = cycle.indices.min(by: { cycle[$0] < cycle[$1] }) else { return cycle }
        return Array(cycle[low...] + cycle[..<low])
    }
}
