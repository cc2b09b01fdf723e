// LockOrder: the lock-order checker (docs/Diagnostics.md §1). Every public ThreadKit lock calls
// `acquire` when it takes the lock (before it waits, if it must) and `release` when it lets go,
// both behind `DiagnosticsSwitch.isOn(.lockOrder)`. The hot part is C (CThreadKitLockOrder.h):
// each thread's stack of held lock ids (thread-local, only its thread touches it) and a lock-free
// cache of known edges, so an acquisition whose edges are all known takes no lock. A new edge
// takes `LockOrderGraph.shared.mutex`, is added to the graph, and, unless the graph's order of
// positions rules it out, a depth-first search from its target looks for a path back to its
// source, visiting only the positions such a path could use: such a path plus the new edge is a
// cycle, i.e. two or more threads taking these locks as they did could deadlock. The cycle is
// reported once.
//
// Identity is per lock instance (as Abseil's deadlock detector, not lockdep's classes): a lock
// gets an id from `nextID` the first time it is checked; its LockName keeps the id and, when the
// lock is freed, removes the lock's node and edges from the graph and the cache. Ids are never
// reused, so an edge a reader still sees for a dead lock can never be mistaken for one of a new
// lock.
import CThreadKit
import Synchronization

@usableFromInline
enum LockOrder {
    /// The next lock id (0 means "none yet"). Relaxed: ids only need to be unique.
    private static let nextID = Atomic<UInt32>(1)

    /// The lock's id, assigned on first use. The CAS settles a race between two first users.
    static func id(of lock: LockName, kind: StaticString) -> UInt32 {
        let id = lock.orderID.load(ordering: .relaxed)
        if id != 0 { return id }
        let fresh = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let (exchanged, current) = lock.orderID.compareExchange(expected: 0, desired: fresh, ordering: .relaxed)
        if !exchanged { return current }
        LockOrderGraph.shared.addNode(fresh, kind: kind, lock: lock)
        return fresh
    }

    /// The calling thread takes (or is about to wait for) `lock`. `isTry`: a try-lock, which
    /// never waits and so orders nothing after the locks already held; it only becomes held.
    @usableFromInline @inline(never)
    static func acquire(_ lock: LockName, kind: StaticString, isTry: Bool = false) {
        let id = id(of: lock, kind: kind)
        if tk_lockorder_check(id, isTry ? 1 : 0) == Int32(TK_LOCKORDER_NEW_EDGE) {
            recordNewEdges(to: id)
            tk_lockorder_push(id, 0)
        }
    }

    /// The calling thread let go of `lock` (or gave up waiting for it).
    @usableFromInline @inline(never)
    static func release(_ lock: LockName) {
        let id = lock.orderID.load(ordering: .relaxed)
        if id != 0 { tk_lockorder_pop(id) }
    }

    /// Checking was switched on: every thread's held stack is stale.
    static func didSwitchOn() { tk_lockorder_reset_all() }

    /// The slow path: some edge from a held lock to `id` is not in the cache. The stack and the
    /// thread's name (a backtrace and a /proc read) are taken only when the graph lacks an edge,
    /// not when the cache merely missed one.
    private static func recordNewEdges(to id: UInt32) {
        let uncached = (0..<tk_lockorder_held_count()).map(tk_lockorder_held_at).filter {
            $0 != id && tk_lockorder_edge_known($0, id) == 0
        }
        let missing = LockOrderGraph.shared.missingEdges(from: uncached, to: id)
        if missing.isEmpty { return }
        let stack = CallStack.capture(skipping: 0)
        let thread = LockOrderThread.current()
        var reports: [TKLockOrderReport] = []
        for held in missing {
            if let report = LockOrderGraph.shared.addEdge(from: held, to: id, stack: stack, thread: thread) {
                reports.append(report)
            }
        }
        for report in reports { TKDiagnostics.deliver(report) }
    }
}
