// DispatchDescriptions: `debugDescription` of queues, sources and groups (issue 14, "Dispatch
// surface"): what libdispatch's `dispatch_debug`/`debugDescription` shows, in words — label,
// target, lifecycle, suspend count, QoS, width and pending work for queues; the count for groups;
// the type, handle, queue and state for sources. Each is a snapshot taken under the object's lock
// (one lock at a time: the target's label is immutable and read without its lock).

extension TKDispatchQueue: CustomDebugStringConvertible {
    /// A one-line snapshot of the queue, like libdispatch's `dispatch_debug`: label, kind, QoS,
    /// width, target, whether it is active, suspend count, pending entries, the serial lane's
    /// state or the concurrent queue's work in flight, and whether a context is set. Taken under
    /// the queue's lock, so it may be stale by the time it is read.
    public var debugDescription: String {
        let kindName: String
        let width: String
        switch kind {
        case .root:
            kindName = "global"
            width = "\(DispatchPool.shared.width) (the pool's workers)"
        case .main:
            kindName = "main"
            width = "1"
        case .serial:
            kindName = "serial"
            width = "1"
        case .concurrent:
            kindName = "concurrent"
            width = "unlimited (the pool's workers)"
        }
        let (lifecycle, suspendCount, pendingCount, inFlight, lane, barrier, targetLabel, hasContext) = lock.withLock {
            (
                state.lifecycle, state.suspendCount, pending.count, state.inFlight, state.lane, state.barrierRunning,
                target?.label, contextValue != nil
            )
        }
        var fields = ["\(kindName)", "qos: \(qos)", "width: \(width)"]
        if let targetLabel { fields.append("target: \"\(targetLabel)\"") }
        if !isRoot {
            fields.append(lifecycle == .active ? "active" : "inactive")
            fields.append("suspend count: \(suspendCount)")
            fields.append("pending: \(pendingCount)")
        }
        switch kind {
        case .serial, .main: fields.append("lane: \(lane)")
        case .concurrent: fields.append("in flight: \(inFlight)\(barrier ? ", barrier running" : "")")
        case .root: break
        }
        if hasContext { fields.append("context set") }
        return "TKDispatchQueue \"\(label)\" { " + fields.joined(separator: ", ") + " }"
    }
}

extension TKDispatchGroup: CustomDebugStringConvertible {
    /// A one-line snapshot of the group: its count (`enter()` minus `leave()`), whether waiters
    /// may be parked, and how many notifications are pending.
    public var debugDescription: String {
        let (count, waiters, notify) = snapshot
        let notifications = pendingNotifications
        var fields = ["count: \(count)"]
        if waiters { fields.append("waiters may be parked") }
        if notify || notifications > 0 { fields.append("notifications pending: \(notifications)") }
        return "TKDispatchGroup { " + fields.joined(separator: ", ") + " }"
    }
}

extension TKDispatchSource: CustomDebugStringConvertible {
    /// A one-line snapshot of the source: its type, handle, queue label, lifecycle (inactive,
    /// active, cancelled), suspend count and what is pending, taken under the source's lock.
    public var debugDescription: String {
        let s = lock.withLock { state }
        var fields = ["type: \(typeName)", "handle: \(handle)", "queue: \"\(queue.label)\""]
        switch s.lifecycle {
        case .inactive: fields.append("inactive")
        case .active: fields.append("active")
        case .cancelled: fields.append("cancelled")
        }
        fields.append("suspend count: \(s.suspendCount)")
        if mask != 0 { fields.append("mask: 0x\(String(mask, radix: 16))") }
        if s.hasPending { fields.append("pending data: \(s.pendingData)") }
        fields.append("delivery: \(s.delivery)")
        if case .timer = kind {
            if let deadline = s.deadline { fields.append("next fire in: \(deadline - ContinuousClock.now)") }
            if let interval = s.interval { fields.append("interval: \(interval)") }
        }
        fields.append("event handler: \(s.eventHandler == nil ? "none" : "set")")
        return "TKDispatchSource { " + fields.joined(separator: ", ") + " }"
    }
}
