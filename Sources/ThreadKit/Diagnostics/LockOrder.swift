// LockOrder: the lock-order checker (docs/Diagnostics.md §1). Every public ThreadKit lock calls
// `acquire` when it takes the lock (before it waits, if it must) and `release` when it lets go,
// both behind `DiagnosticsSwitch.isOn(.lockOrder)`. The hot part is C (CThreadKitLockOrder.h):
// each thread's stack of held lock ids (thread-local, only its thread touches it) and a lock-free
// cache of known edges, so an acquisition whose edges are all known takes no lock. A new edge
// takes `LockOrderGraph.shared.mutex`, is added to the graph, and a depth-first search from its
// target looks for a path back to its source: such a path plus the new edge is a cycle, i.e. two
// or more threads taking these locks as they did could deadlock. The cycle is reported once.
//
// Identity is per lock instance (as Abseil's deadlock detector, not lockdep's classes): a lock
// gets an id from `nextID` the first time it is checked; its LockName keeps the id and forgets the
// lock's node when the lock is freed. Ids are never reused, so an edge cached for a dead lock can
// never be mistaken for one of a new lock.
import CThreadKit
import Glibc
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

    /// The slow path: some edge from a held lock to `id` is not in the cache.
    private static func recordNewEdges(to id: UInt32) {
        let stack = LockOrderStack.capture(skipping: 2)
        let thread = LockOrderThread.current()
        var reports: [TKLockOrderReport] = []
        for index in 0..<tk_lockorder_held_count() {
            let held = tk_lockorder_held_at(index)
            if held == id || tk_lockorder_edge_known(held, id) != 0 { continue }
            if let report = LockOrderGraph.shared.addEdge(from: held, to: id, stack: stack, thread: thread) {
                reports.append(report)
            }
        }
        for report in reports { TKDiagnostics.deliver(report) }
    }
}

/// Where an edge was first seen: return addresses, symbolized only when a report needs them.
struct LockOrderStack: Sendable {
    let addresses: [UInt]

    /// The caller's stack, without this function and `skipping` more frames.
    static func capture(skipping: Int) -> LockOrderStack {
        var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 48)
        let n = Int(buffer.withUnsafeMutableBufferPointer { tk_backtrace($0.baseAddress, 48) })
        let start = min(n, skipping + 1)
        return LockOrderStack(addresses: buffer[start..<n].map { UInt(bitPattern: $0) })
    }

    /// Symbolized frames, with ThreadKit's own leading frames (the lock's hook) dropped.
    var symbols: [String] { LockOrderStack.symbolize(addresses, dropLeadingThreadKitFrames: true) }

    static func symbolize(_ addresses: [UInt], dropLeadingThreadKitFrames: Bool, limit: Int = 24) -> [String] {
        var frames = addresses.map { UnsafeMutableRawPointer(bitPattern: $0) }
        let count = Int32(frames.count)
        guard count > 0, let symbols = frames.withUnsafeMutableBufferPointer({ tk_backtrace_symbols($0.baseAddress, count) }) else {
            return addresses.map { "0x\(String($0, radix: 16))" }
        }
        defer { free(symbols) }
        var lines = (0..<frames.count).map { symbols[$0].map { CallStackSymbol(String(cString: $0)).readable } ?? "?" }
        if dropLeadingThreadKitFrames {
            // The hook's own frames: up to the last ThreadKit-named one near the top (private
            // helpers between them are not exported, so they show as bare addresses).
            let own = lines.prefix(8).lastIndex { line in
                let symbol = line.drop { $0 != " " }.dropFirst()   // after "image "
                return symbol.hasPrefix("ThreadKit.") || symbol.hasPrefix("static ThreadKit.")
            }
            if let own, own + 1 < lines.count { lines.removeFirst(own + 1) }
        }
        return Array(lines.prefix(limit))
    }
}

/// The thread an edge was seen on, for reports.
struct LockOrderThread: Sendable {
    let tid: UInt32
    let name: String

    static func current() -> LockOrderThread {
        let tid = SystemCall.currentThreadID
        return LockOrderThread(tid: tid, name: name(of: tid))
    }

    static func name(of tid: UInt32) -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        guard tk_thread_name(tid, &buffer, 32) > 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    var description: String { name.isEmpty ? "thread \(tid)" : "thread \(tid) \"\(name)\"" }
}
