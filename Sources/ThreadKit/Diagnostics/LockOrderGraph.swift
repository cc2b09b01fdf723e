// LockOrderGraph: the lock-order graph behind LockOrder (docs/Diagnostics.md §1). Nodes are lock
// ids, an edge A → B means "some thread acquired B while holding A". Everything here is guarded
// by `mutex` (a RawMutex leaf: nothing else is locked while it is held, and no user lock is taken
// under it, so it is outside the user-visible order). Only new edges and lock creation/destruction
// reach it; known edges are answered by the C cache without it.
import CThreadKit

final class LockOrderGraph: @unchecked Sendable {
    static let shared = LockOrderGraph()

    private struct Node {
        let kind: StaticString
        weak var lock: LockName?
        /// The name when the node was last described, kept for reports that outlive the lock.
        var lastName: String?
    }

    struct Edge {
        let stack: LockOrderStack
        let thread: LockOrderThread
    }

    private let mutex = RawMutex()
    private var nodes: [UInt32: Node] = [:]                 // guarded by mutex
    private var outgoing: [UInt32: [UInt32: Edge]] = [:]    // guarded by mutex
    private var incoming: [UInt32: Set<UInt32>] = [:]       // guarded by mutex
    private var reported: Set<[UInt32]> = []                // guarded by mutex: cycles, smallest id first
    private(set) var reports: [TKLockOrderReport] = []      // guarded by mutex (read via `allReports`)

    func addNode(_ id: UInt32, kind: StaticString, lock: LockName) {
        mutex.withLock { nodes[id] = Node(kind: kind, lock: lock) }
    }

    /// The lock of `id` was freed: its node and edges go (its id is never reused).
    func removeNode(_ id: UInt32) {
        mutex.withLock {
            nodes[id] = nil
            if let edges = outgoing.removeValue(forKey: id) {
                for to in edges.keys { incoming[to]?.remove(id) }
            }
            for from in incoming.removeValue(forKey: id) ?? [] { outgoing[from]?[id] = nil }
        }
    }

    /// Adds `from → to` if new and returns the report of the cycle it closes, if any and not
    /// reported before. The edge enters the C cache only after the graph has it, so a thread that
    /// finds it cached never skips a cycle search that has not happened.
    func addEdge(from: UInt32, to: UInt32, stack: LockOrderStack, thread: LockOrderThread) -> TKLockOrderReport? {
        // The cycle's locks are described after the mutex is released: reading a weak LockName
        // makes a strong reference, and if that is the last one, the LockName's deinit (which
        // takes this mutex) must not run under it.
        let found: (cycle: [UInt32], nodes: [(StaticString, LockName?)], edges: [Edge])? = mutex.withLock {
            guard nodes[from] != nil, nodes[to] != nil, outgoing[from]?[to] == nil else { return nil }
            outgoing[from, default: [:]][to] = Edge(stack: stack, thread: thread)
            incoming[to, default: []].insert(from)
            guard let path = pathLocked(from: to, to: from) else { return nil }
            // path: to … from; with the new edge from → to it closes the cycle.
            let cycle = [from] + path.dropLast()
            let key = canonical(cycle)
            guard !reported.contains(key) else { return nil }
            reported.insert(key)
            let described = cycle.map { (nodes[$0]?.kind ?? "lock", nodes[$0]?.lock) }
            let edges = cycle.indices.compactMap { outgoing[cycle[$0]]?[cycle[($0 + 1) % cycle.count]] }
            return (cycle, described, edges)
        }
        _ = tk_lockorder_edge_insert(from, to)
        guard let found else { return nil }
        let names = zip(found.cycle, found.nodes).map { id, node in
            node.1?.name.map { "\(node.0) \"\($0)\"" } ?? "\(node.0) #\(id)"
        }
        let edges = found.edges.indices.map { i in
            TKLockOrderReport.Edge(held: names[i], acquired: names[(i + 1) % names.count],
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
        mutex.withLock { (nodes.count, outgoing.values.reduce(0) { $0 + $1.count }) }
    }

    // MARK: Search and report (mutex held)

    /// A path start … goal over the edges, found depth first, or nil.
    private func pathLocked(from start: UInt32, to goal: UInt32) -> [UInt32]? {
        var visited: Set<UInt32> = [start]
        var path: [UInt32] = [start]
        var iterators: [Dictionary<UInt32, Edge>.Keys.Iterator] = [(outgoing[start] ?? [:]).keys.makeIterator()]
        while !iterators.isEmpty {
            guard let next = iterators[iterators.count - 1].next() else {
                iterators.removeLast()
                path.removeLast()
                continue
            }
            if next == goal { return path + [goal] }
            guard visited.insert(next).inserted, nodes[next] != nil else { continue }
            path.append(next)
            iterators.append((outgoing[next] ?? [:]).keys.makeIterator())
        }
        return nil
    }

    /// The cycle rotated to start at its smallest id: the same cycle found from any edge matches.
    private func canonical(_ cycle: [UInt32]) -> [UInt32] {
        guard let low = cycle.indices.min(by: { cycle[$0] < cycle[$1] }) else { return cycle }
        return Array(cycle[low...] + cycle[..<low])
    }
}
