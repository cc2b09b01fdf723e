// LockName: the thread-safe `name` property shared by the lock classes, and the lock's identity
// for the diagnostics (its lock-order id and its contention counters, docs/Diagnostics.md).
// Names are read on the misuse and diagnostics paths and by debuggers, written rarely.
import Synchronization

// safety: the name is a `Protected`; the id is atomic; the metrics slot locks itself.
@usableFromInline
final class LockName: @unchecked Sendable {
    private let storage: Protected<String?>
    /// The lock's id in the lock-order graph, 0 until first checked (LockOrder.id(of:kind:)).
    /// Relaxed: the id is only compared; the graph has its own mutex.
    let orderID = Atomic<UInt32>(0)
    /// The lock's (or queue's) metrics counters, made when `.metrics` first sees it (Metrics.swift).
    let metrics = MetricsSlot()

    init(_ name: String? = nil) { storage = Protected(name) }

    deinit {
        let id = orderID.load(ordering: .relaxed)
        if id != 0 { LockOrderGraph.shared.removeNode(id) }
    }

    var name: String? {
        get { storage.current }
        set { storage.current = newValue }
    }

    /// `TKLock "store"` or `TKLock ObjectIdentifier(0x…)` when unnamed: how misuse messages name a lock.
    func describe(_ kind: String, _ object: AnyObject) -> String {
        if let name { return "\(kind) \"\(name)\"" }
        return "\(kind) \(ObjectIdentifier(object))"
    }

    /// A new identity for the lock-order checker (the synchronized table hands a lock to a new
    /// token): edges of the old identity no longer apply to it.
    func renewOrderIdentity() {
        let id = orderID.exchange(0, ordering: .relaxed)
        if id != 0 { LockOrderGraph.shared.removeNode(id) }
    }
}
