// TKDispatchQueue+Target: retargeting an inactive queue (`setTarget(queue:)`, Swift Dispatch's
// DispatchObject.setTarget) and the queue's context with its finalizer (dispatch_set_context /
// dispatch_set_finalizer_f). Both are guarded by the queue's `lock`; see TKDispatchQueue.swift's
// header for who reads `target` without it.

extension TKDispatchQueue {
    /// Makes the queue run its work on `queue` (nil: the global queue of the queue's QoS), as
    /// Swift Dispatch's `setTarget(queue:)`. Only an inactive queue (created with
    /// `.initiallyInactive`, before `activate()`) can be retargeted: retargeting an active queue,
    /// a global queue or the main queue, or making a target chain that loops back to the queue, is
    /// a misuse that stops the process.
    public func setTarget(queue newTarget: TKDispatchQueue?) {
        let call = "setTarget(queue: \(newTarget.map { "\"\($0.label)\"" } ?? "nil"))"
        guard kind == .serial || kind == .concurrent else {
            misuse(
                "\(described).\(call): the global and main queues run on the pool and the main thread and cannot be "
                    + "retargeted. Fix: retarget a queue of your own (created with attributes: .initiallyInactive).")
        }
        let resolved = newTarget ?? TKDispatchQueue.global(qos: qos)
        var hop: TKDispatchQueue? = resolved
        while let q = hop {
            if q === self {
                misuse(
                    "\(described).\(call): the target chain would loop back to \(described), so its work could "
                        + "never run. Fix: target a queue that does not run on \(described).")
            }
            hop = q.lock.withLock { q.target }
        }
        lock.lock()
        guard state.lifecycle == .inactive else {
            lock.unlock()
            misuse(
                "\(described).\(call) called on an active queue: its work may already be running on its "
                    + "target, and Swift Dispatch forbids retargeting it. Fix: create the queue with attributes: "
                    + ".initiallyInactive, call setTarget(queue:) and then activate(), or pass target: to init.")
        }
        target = resolved
        lock.unlock()
    }

    /// The application-defined context of the queue (dispatch_get_context/dispatch_set_context),
    /// handed to the finalizer when the queue is freed. Nil until set.
    public var context: (any Sendable)? {
        get { lock.withLock { contextValue } }
        set { lock.withLock { contextValue = newValue } }
    }

    /// Sets what runs once when the queue is freed (its last reference dropped and its work
    /// done): `finalizer(context)`, submitted asynchronously to the queue's target, as
    /// dispatch_set_finalizer_f does; like libdispatch it is not called if `context` is nil then.
    /// Global queues and the main queue are never freed, so their finalizer never runs.
    public func setFinalizer(_ finalizer: (@Sendable (any Sendable) -> Void)?) {
        lock.withLock { self.finalizer = finalizer }
    }
}
