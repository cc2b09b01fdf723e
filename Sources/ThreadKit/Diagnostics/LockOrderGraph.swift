// LockOrderGraph: the lock-order graph behind LockOrder (docs/Diagnostics.md §1). Nodes are lock
// ids, an edge A → B means "some thread acquired B while holding A". Everything here is guarded
// by `mutex` (a RawMutex leaf: nothing else is locked while it is held, and no user lock is taken
// under it, so it is outside the user-visible order). Only new edges and lock creation/destruction
// reach it; known edges are answered by the C cache without it. The cache's writers (insert and
// remove) run only under `mutex`, which is what serialises them (CThreadKitLockOrder.h).
//
// Layout: each live lock has a slot (reused once its lock is freed); per slot its id, kind, order
// position and the slots of its successors and predecessors, in arrays, so a search step is an
// array read and a stamp compare. `edges` maps (from id, to id) to the edge's stack and thread and
// its place in both adjacency arrays, so an edge leaves them in O(1) (swap with the last).
//
// Searches visit only what they must (Pearce and Kelly's dynamic topological order, 2006): the
// graph keeps a position `order` per lock such that every *ordered* edge goes from a lower to a
// higher position. An edge that closed a cycle, or whose search was cut short, is kept *unordered*
// (no position constraint); `unorderedBound` is at least the position of every unordered edge's
// source. A path from y back to x can then only pass through positions up to
// max(order[x], unorderedBound): past that, ordered edges only climb, and neither x nor any
// unordered edge is up there. So a new edge x → y
//   - with order[y] above that bound needs no search at all (the usual case: locks are mostly
//     taken in one order, which the positions come to follow);
//   - otherwise is searched from y, over positions up to the bound only; a path found is a cycle
//     (reported; the edge stays unordered);
//   - with no path and order[x] > order[y], is made ordered by moving positions: the locks the
//     search reached between order[y] and order[x] (F), and those that reach x in that range,
//     found by a second, backward search (B), share their positions again, B's first: F only moves
//     up, B only down, every ordered edge still climbs.
// A search (both parts together) examines at most `searchBudget` edges; one that runs out is
// counted (`truncatedSearches`, in the summary) and said once on stderr: a cycle through that
// edge may go unreported (it is kept unordered); none is ever reported falsely.
//
// Bounds: a freed lock's node and edges leave the graph and the cache (LockName's deinit), so
// short-lived locks leave nothing behind.
import CThreadKit

final class LockOrderGraph: @unchecked Sendable {
    // safety: @unchecked Sendable: every stored property but the immutable `mutex` is read and
    // written only with `mutex` held.
    static let shared = LockOrderGraph()

    /// Edges one cycle search may examine before it gives up (the default of `searchBudget`).
    static let defaultSearchBudget = 16_384

    private struct Node {
        let id: UInt32
        let kind: StaticString
        weak var lock: LockName?
    }

    struct Edge {
        let stack: CallStack
        let thread: LockOrderThread
    }

    /// An edge, where it sits in its source's `successors` and its target's `predecessors`, and
    /// whether it is ordered (its source's position is below its target's).
    private struct EdgeEntry {
        let edge: Edge
        var successorIndex: Int
        var predecessorIndex: Int
        let ordered: Bool
    }

    /// What the searches did, for the summary and tests.
    struct SearchCounts: Equatable {
        /// Cycle searches made (new edges whose positions left a cycle possible).
        var searches = 0
        /// New edges whose positions ruled a cycle out: no search.
        var skipped = 0
        /// Searches that ran out of budget before they were done.
        var truncated = 0
        /// Edges the last search examined.
        var lastSteps = 0
        /// The most edges any search examined.
        var mostSteps = 0
    }

    private let mutex = RawMutex()
    // All guarded by mutex; the arrays are indexed by slot.
    private var slots: [UInt32: Int] = [:]
    private var nodes: [Node?] = []
    private var freeSlots: [Int] = []
    private var order: [Int] = []
    private var nextOrder = 0
    private var successors: [[Int32]] = []
    private var predecessors: [[Int32]] = []
    private var unorderedOut: [Int32] = [] // unordered edges leaving each slot
    private var stamps: [UInt32] = [] // a slot is visited by the current search when it holds `stamp`
    private var stamp: UInt32 = 0
    private var edges: [UInt64: EdgeEntry] = [:]
    private var unorderedEdges = 0
    private var unorderedBound = Int.min // ≥ the position of every unordered edge's source
    private var reported: Set<[UInt32]> = [] // cycles, smallest id first
    private(set) var reports: [TKLockOrderReport] = [] // read via `allReports`
    private var counts = SearchCounts()
    private var budget = LockOrderGraph.defaultSearchBudget
    private var truncationSaid = false

    private static func key(_ from: UInt32, _ to: UInt32) -> UInt64 { UInt64(from) << 32 | UInt64(to) }

    func addNode(_ id: UInt32, kind: StaticString, lock: LockName) {
        mutex.withLock {
            let slot: Int
            if let free = freeSlots.popLast() {
                slot = free
            } else {
                slot = nodes.count
                nodes.append(nil)
                order.append(0)
                successors.append([])
                predecessors.append([])
                unorderedOut.append(0)
                stamps.append(0)
            }
            nodes[slot] = Node(id: id, kind: kind, lock: lock)
            order[slot] = nextOrder // a new lock comes last: it has no edges yet
            nextOrder += 1
            slots[id] = slot
        }
    }

    /// The lock of `id` was freed: its node and edges go, from the graph and from the C cache
    /// (its id is never reused).
    func removeNode(_ id: UInt32) {
        mutex.withLock {
            guard let slot = slots.removeValue(forKey: id) else { return }
            var droppedUnordered = false
            for target in successors[slot] {
                let to = nodes[Int(target)]!.id
                guard let entry = edges.removeValue(forKey: Self.key(id, to)) else { continue }
                removePredecessor(at: entry.predecessorIndex, of: Int(target))
                droppedUnordered = droppedUnordered || !entry.ordered
                if !entry.ordered { unorderedEdges -= 1 }
                _ = tk_lockorder_edge_remove(id, to)
            }
            for source in predecessors[slot] {
                let from = nodes[Int(source)]!.id
                guard let entry = edges.removeValue(forKey: Self.key(from, id)) else { continue }
                removeSuccessor(at: entry.successorIndex, of: Int(source))
                if !entry.ordered {
                    unorderedEdges -= 1
                    unorderedOut[Int(source)] -= 1
                    droppedUnordered = true
                }
                _ = tk_lockorder_edge_remove(from, id)
            }
            successors[slot] = []
            predecessors[slot] = []
            unorderedOut[slot] = 0
            nodes[slot] = nil
            freeSlots.append(slot)
            if droppedUnordered { recomputeUnorderedBoundLocked() }
        }
    }

    /// Of the edges `held[i] → to`, those the graph lacks (both locks alive). Those it has are put
    /// back into the C cache (an insert that found the probe window full earlier may succeed now).
    /// Lets the slow path skip capturing a stack when the cache only missed an edge.
    func missingEdges(from held: [UInt32], to: UInt32) -> [UInt32] {
        mutex.withLock {
            guard slots[to] != nil else { return [] }
            return held.filter { from in
                guard slots[from] != nil else { return false }
                if edges[Self.key(from, to)] == nil { return true }
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
        let found = mutex.withLock { () -> (cycle: [UInt32], nodes: [(StaticString, LockName?)], edges: [Edge])? in
            guard from != to, let x = slots[from], let y = slots[to] else { return nil }
            guard edges[Self.key(from, to)] == nil else {
                _ = tk_lockorder_edge_insert(from, to)
                return nil
            }
            let placed = placeLocked(x, before: y)
            if placed.truncated && !truncationSaid {
                truncationSaid = true
                truncation =
                    "ThreadKit lock order: a cycle search gave up after \(placed.steps) steps (\(slots.count) locks, "
                    + "\(edges.count) orders in the graph): cycles through some orders may go unreported. "
                    + "Fix: free locks that are no longer used; the order of many thousands of live locks is not checked in full."
            }
            insertEdgeLocked(x, y, Edge(stack: stack, thread: thread), ordered: placed.ordered)
            _ = tk_lockorder_edge_insert(from, to)
            guard let path = placed.cycle else { return nil }
            // path: to … from; with the new edge from → to it closes the cycle.
            let cycle = [from] + path.dropLast().map { nodes[Int($0)]!.id }
            let key = canonical(cycle)
            guard !reported.contains(key) else { return nil }
            reported.insert(key)
            let described = cycle.map { id -> (StaticString, LockName?) in
                guard let slot = slots[id], let node = nodes[slot] else { return ("lock", nil) }
                return (node.kind, node.lock)
            }
            let cycleEdges = cycle.indices.compactMap { edges[Self.key(cycle[$0], cycle[($0 + 1) % cycle.count])]?.edge }
            return (cycle, described, cycleEdges)
        }
        if let truncation, DiagnosticsState.shared.read(\.prints) { TKDiagnostics.printError(truncation) }
        guard let found else { return nil }
        let names = zip(found.cycle, found.nodes).map { id, node in
            node.1?.name.map { "\(node.0) \"\($0)\"" } ?? "\(node.0) #\(id)"
        }
        let reportEdges = found.edges.indices.map { i in
            TKLockOrderReport.Edge(
                held: names[i], acquired: names[(i + 1) % names.count],
                thread: found.edges[i].thread.description, stack: found.edges[i].stack)
        }
        let report = TKLockOrderReport(locks: names, edges: reportEdges)
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
        mutex.withLock { (slots.count, edges.count) }
    }

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

    /// Whether the graph's positions are consistent: every ordered edge climbs, and
    /// `unorderedBound` covers every unordered edge's source (tests).
    var isOrderConsistent: Bool {
        mutex.withLock {
            edges.values.isEmpty
                || zip(successors.indices, successors).allSatisfy { source, targets in
                    targets.allSatisfy { target in
                        let entry = edges[Self.key(nodes[source]!.id, nodes[Int(target)]!.id)]!
                        return entry.ordered ? order[source] < order[Int(target)] : order[source] <= unorderedBound
                    }
                }
        }
    }

    // MARK: Placing a new edge (mutex held)

    /// Decides how the new edge x → y (slots) enters: the cycle it closes (y … x, slots), whether
    /// it is ordered (positions moved if needed), and whether the search ran out of budget.
    private func placeLocked(_ x: Int, before y: Int) -> (cycle: [Int32]?, ordered: Bool, truncated: Bool, steps: Int) {
        mutex.assertHeld("LockOrderGraph.mutex")
        let bound = max(order[x], unorderedBound)
        guard order[y] <= bound else {
            // Past the bound nothing leads back to x: no cycle, and y is already above x.
            counts.skipped += 1
            return (nil, true, false, 0)
        }
        let forward = searchForward(from: y, to: x, upTo: bound)
        var steps = forward.steps
        var truncated = forward.truncated
        var ordered = forward.path == nil && !truncated
        if ordered && order[x] > order[y] {
            // F: what y reaches between order[y] and order[x]; B: what reaches x in that range.
            let low = order[y]
            let high = order[x]
            let reachedForward = forward.visited.filter { order[Int($0)] >= low && order[Int($0)] < high }
            let backward = searchBackward(from: x, above: low, budget: budget - steps)
            steps += backward.steps
            if backward.truncated {
                truncated = true
                ordered = false
            } else {
                reorderLocked(backward: backward.visited, forward: reachedForward)
            }
        }
        counts.searches += 1
        counts.lastSteps = steps
        counts.mostSteps = max(counts.mostSteps, steps)
        if truncated { counts.truncated += 1 }
        return (forward.path, ordered, truncated, steps)
    }

    /// A fresh visit stamp (all slots unvisited).
    private func nextStampLocked() -> UInt32 {
        mutex.assertHeld("LockOrderGraph.mutex")
        stamp &+= 1
        if stamp == 0 {
            for i in stamps.indices { stamps[i] = 0 }
            stamp = 1
        }
        return stamp
    }

    /// Depth first from `start` over successors at positions up to `bound`, looking for `goal`:
    /// the path start … goal (slots) if found; the slots visited; `truncated` when the budget ran
    /// out first (then `path` is nil); `steps`: edges examined.
    private func searchForward(from start: Int, to goal: Int, upTo bound: Int)
        -> (path: [Int32]?, visited: [Int32], truncated: Bool, steps: Int)
    {
        let mark = nextStampLocked()
        stamps[start] = mark
        var visited: [Int32] = [Int32(start)]
        var stack: [(slot: Int, next: Int)] = [(start, 0)]
        var steps = 0
        while let top = stack.last {
            let targets = successors[top.slot]
            guard top.next < targets.count else {
                stack.removeLast()
                continue
            }
            stack[stack.count - 1].next += 1
            if steps == budget { return (nil, visited, true, steps) }
            steps += 1
            let next = Int(targets[top.next])
            if next == goal { return (stack.map { Int32($0.slot) } + [Int32(goal)], visited, false, steps) }
            guard stamps[next] != mark, order[next] <= bound else { continue }
            stamps[next] = mark
            visited.append(Int32(next))
            stack.append((next, 0))
        }
        return (nil, visited, false, steps)
    }

    /// Depth first from `start` over predecessors at positions above `low` and below start's:
    /// the slots visited (start included); `truncated` when `budget` edges were not enough.
    private func searchBackward(from start: Int, above low: Int, budget: Int) -> (visited: [Int32], truncated: Bool, steps: Int) {
        let mark = nextStampLocked()
        let high = order[start]
        stamps[start] = mark
        var visited: [Int32] = [Int32(start)]
        var stack: [(slot: Int, next: Int)] = [(start, 0)]
        var steps = 0
        while let top = stack.last {
            let sources = predecessors[top.slot]
            guard top.next < sources.count else {
                stack.removeLast()
                continue
            }
            stack[stack.count - 1].next += 1
            if steps >= budget { return (visited, true, steps) }
            steps += 1
            let next = Int(sources[top.next])
            guard stamps[next] != mark, order[next] > low, order[next] < high else { continue }
            stamps[next] = mark
            visited.append(Int32(next))
            stack.append((next, 0))
        }
        return (visited, false, steps)
    }

    /// Gives `backward` and then `forward` (each in its present relative order) the positions
    /// they hold together, lowest first.
    private func reorderLocked(backward: [Int32], forward: [Int32]) {
        mutex.assertHeld("LockOrderGraph.mutex")
        let b = backward.sorted { order[Int($0)] < order[Int($1)] }
        let f = forward.sorted { order[Int($0)] < order[Int($1)] }
        let positions = (b + f).map { order[Int($0)] }.sorted()
        for (slot, position) in zip(b + f, positions) { order[Int(slot)] = position }
        // F moved up: an unordered edge's source among them raises the bound.
        for slot in f where unorderedOut[Int(slot)] > 0 { unorderedBound = max(unorderedBound, order[Int(slot)]) }
    }

    private func insertEdgeLocked(_ x: Int, _ y: Int, _ edge: Edge, ordered: Bool) {
        mutex.assertHeld("LockOrderGraph.mutex")
        let entry = EdgeEntry(
            edge: edge, successorIndex: successors[x].count, predecessorIndex: predecessors[y].count, ordered: ordered)
        edges[Self.key(nodes[x]!.id, nodes[y]!.id)] = entry
        successors[x].append(Int32(y))
        predecessors[y].append(Int32(x))
        if !ordered {
            unorderedEdges += 1
            unorderedOut[x] += 1
            unorderedBound = max(unorderedBound, order[x])
        }
    }

    /// Removes the entry at `index` of `slot`'s successors (the last one takes its place).
    private func removeSuccessor(at index: Int, of slot: Int) {
        let last = successors[slot].removeLast()
        guard index < successors[slot].count else { return }
        successors[slot][index] = last
        edges[Self.key(nodes[slot]!.id, nodes[Int(last)]!.id)]!.successorIndex = index
    }

    /// Removes the entry at `index` of `slot`'s predecessors (the last one takes its place).
    private func removePredecessor(at index: Int, of slot: Int) {
        let last = predecessors[slot].removeLast()
        guard index < predecessors[slot].count else { return }
        predecessors[slot][index] = last
        edges[Self.key(nodes[Int(last)]!.id, nodes[slot]!.id)]!.predecessorIndex = index
    }

    /// The bound again from the unordered edges left (an edge of a freed lock went).
    private func recomputeUnorderedBoundLocked() {
        mutex.assertHeld("LockOrderGraph.mutex")
        unorderedBound = Int.min
        guard unorderedEdges > 0 else { return }
        for slot in unorderedOut.indices where unorderedOut[slot] > 0 { unorderedBound = max(unorderedBound, order[slot]) }
    }

    /// The cycle rotated to start at its smallest id: the same cycle found from any edge matches.
    private func canonical(_ cycle: [UInt32]) -> [UInt32] {
        guard let low = cycle.indices.min(by: { cycle[$0] < cycle[$1] }) else { return cycle }
        return Array(cycle[low...] + cycle[..<low])
    }
}
