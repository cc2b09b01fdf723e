// TKConditionLock: NSConditionLock, a lock that carries an integer condition. Thread-safe.
// The lock *is* `raw`: holding the condition lock means holding that mutex. `value` is guarded
// by it; threads waiting for a particular value sleep on `changed`, which is broadcast whenever
// an unlock changes the value.

// safety: `value` is touched only under `raw`; the rest is thread-safe.
/// A lock associated with an integer condition (NSConditionLock). `lock(whenCondition:)` waits
/// until the lock is free *and* its condition equals the one asked for; `unlock(withCondition:)`
/// sets the condition as it releases the lock, waking the threads waiting for that value.
public final class TKConditionLock: TKLocking, @unchecked Sendable {
    private let raw = RawMutex()
    private let changed = RawCondition()
    private let label = LockName()
    /// The current condition. Guarded by `raw`.
    private var value: Int

    /// Creates an unlocked lock whose condition is `condition`, like `NSConditionLock(condition:)`.
    public init(condition: Int = 0) {
        value = condition
    }

    /// A name for diagnostics: misuse messages, lock-order reports, contention counters and
    /// traces name the lock by it. Thread-safe.
    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    /// The condition as last set. Taking the lock to read it keeps the read ordered with writers.
    public var condition: Int {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid { return value }
        acquire(tid, deadline: nil)
        defer { releaseRaw(tid) }
        return value
    }

    /// Takes the lock whatever its condition, blocking until it is free. Not recursive: locking
    /// it again on the thread that holds it stops the process with a message.
    public func lock() {
        acquire(SystemCall.currentThreadID, deadline: nil)
    }

    /// Takes the lock whatever its condition, waiting no later than `deadline`; false when it
    /// timed out (never before the deadline).
    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        acquire(SystemCall.currentThreadID, deadline: deadline)
    }

    /// Blocks until the lock is free and its condition equals `condition`, then takes it, like
    /// `NSConditionLock.lock(whenCondition:)`.
    public func lock(whenCondition condition: Int) {
        _ = lock(whenCondition: condition, deadline: nil)
    }

    /// As ``lock(whenCondition:)``, giving up at `deadline`: false when the lock was not free with
    /// that condition in time (never before the deadline); the lock is then not held.
    public func lock(whenCondition condition: Int, before deadline: ContinuousClock.Instant) -> Bool {
        lock(whenCondition: condition, deadline: deadline)
    }

    /// Takes the lock if it is free now, whatever its condition; never blocks.
    public func tryLock() -> Bool {
        guard raw.tryLockFast(SystemCall.currentThreadID) else { return false }
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKConditionLock", isTry: true) }
        return true
    }

    /// Takes the lock if it is free now and its condition equals `condition`; never blocks.
    public func tryLock(whenCondition condition: Int) -> Bool {
        let tid = SystemCall.currentThreadID
        guard raw.tryLockFast(tid) else { return false }
        if value == condition {
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKConditionLock", isTry: true) }
            return true
        }
        _ = raw.unlock(tid)
        return false
    }

    /// Releases the lock, leaving its condition as it is. A call from a thread that does not hold
    /// it stops the process with a message.
    public func unlock() {
        release(newValue: nil, call: "unlock()")
    }

    /// Sets the condition and releases the lock, waking threads waiting for the new value.
    public func unlock(withCondition condition: Int) {
        release(newValue: condition, call: "unlock(withCondition: \(condition))")
    }

    private func lock(whenCondition wanted: Int, deadline: ContinuousClock.Instant?) -> Bool {
        let tid = SystemCall.currentThreadID
        guard acquire(tid, deadline: deadline) else { return false }
        while value != wanted {
            let waiting = WaitGraph.begin(self, .condition, "TKConditionLock.lock(whenCondition:)") // §6
            let signalled = changed.wait(raw, tid, deadline: deadline)
            WaitGraph.end(waiting)
            if !signalled {
                // Timed out, and the mutex is held again: one last look, then give it back.
                if value == wanted { return true }
                releaseRaw(tid)
                return false
            }
        }
        return true
    }

    /// Takes the mutex (checking the lock order first: a wait here may be the deadlock).
    @discardableResult
    private func acquire(_ tid: UInt32, deadline: ContinuousClock.Instant?) -> Bool {
        let checked = DiagnosticsSwitch.isOn(.lockOrder)
        if checked { LockOrder.acquire(label, kind: "TKConditionLock") }
        if raw.tryLockFast(tid) { return true }
        let start = Contention.start()
        let waiting = WaitGraph.begin(self, .lock, "TKConditionLock.lock()") // who waits for whom (§6)
        let result = raw.lockSlow(tid, deadline: deadline)
        WaitGraph.end(waiting)
        Contention.lockWaited(label, kind: "TKConditionLock", since: start)
        switch result {
        case .acquired: return true
        case .timedOut:
            if checked { LockOrder.release(label) }
            return false
        case .heldByCaller:
            misuse(
                "\(label.describe("TKConditionLock", self)) locked again on thread \(tid), which already holds it: "
                    + "this would deadlock. Fix: unlock (or unlock(withCondition:)) before locking again.")
        }
    }

    private func release(newValue: Int?, call: String) {
        let tid = SystemCall.currentThreadID
        guard raw.owner() == tid else {
            misuse(
                "\(label.describe("TKConditionLock", self)).\(call) called on thread \(tid), but \(raw.ownerDescription()). "
                    + "Fix: unlock on the thread that locked it, once per lock.")
        }
        let wake = newValue.map { $0 != value } ?? false
        if let newValue { value = newValue }
        // Broadcast before releasing: waiters re-check `value` under the mutex, so waking them
        // first lets them spin for the mutex rather than park again.
        if wake { changed.broadcast() }
        releaseRaw(tid)
    }

    /// Releases the mutex held by the caller, telling the lock-order checker.
    private func releaseRaw(_ tid: UInt32) {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
        _ = raw.unlock(tid)
    }
}

extension TKConditionLock: WaitTarget {
    var waitDescription: String { label.describe("TKConditionLock", self) }
    /// The lock's owner (for a lock wait; waiting for a condition value has no holder).
    var waitHolder: WaitHolder { raw.waitHolder }
}
