// TKRecursiveLock: NSRecursiveLock. A RawMutex plus a depth that only the holding thread touches.
import Synchronization

/// A lock the holding thread may take again; it is released when every `lock()` has been matched
/// by an `unlock()`. Unlocking from a thread that does not hold it stops the process with a message.
public final class TKRecursiveLock: TKLocking, @unchecked Sendable {
    @usableFromInline let raw = RawMutex()
    @usableFromInline let label = LockName()
    /// How many times the holder has locked. Read and written only by the thread that holds `raw`;
    /// the mutex's acquire/release order it between successive holders, so relaxed suffices. An
    /// atomic rather than a plain var only to skip Swift's dynamic exclusivity checks.
    @usableFromInline let depth = Atomic<Int>(0)

    public init() {}
    deinit { raw.deallocate() }

    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    // lock() and unlock() are inlinable: re-entry and the uncontended first lock and last unlock
    // compile into the caller.

    @inlinable
    public func lock() {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) + 1, ordering: .relaxed)
        } else if raw.tryLockFast(tid) {
            depth.store(1, ordering: .relaxed)
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKRecursiveLock") }
        } else {
            lockContended()
        }
    }

    @usableFromInline
    func lockContended() {
        _ = lock(deadline: nil)
    }

    @inlinable
    public func unlock() {
        let tid = SystemCall.currentThreadID
        let remaining = depth.load(ordering: .relaxed) - 1
        if raw.owner() == tid && remaining > 0 {
            depth.store(remaining, ordering: .relaxed)
        } else {
            unlockLast(tid)
        }
    }

    @usableFromInline
    func unlockLast(_ tid: UInt32) {
        guard raw.owner() == tid else {
            misuse("\(label.describe("TKRecursiveLock", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
                   + "Fix: balance every lock() with one unlock() on the same thread.")
        }
        let remaining = depth.load(ordering: .relaxed) - 1
        depth.store(remaining, ordering: .relaxed)
        if remaining == 0 {
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
            _ = raw.unlock(tid)
        }
    }

    public func tryLock() -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) + 1, ordering: .relaxed)
            return true
        }
        guard raw.tryLockFast(tid) else { return false }
        depth.store(1, ordering: .relaxed)
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKRecursiveLock", isTry: true) }
        return true
    }

    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        lock(deadline: deadline)
    }

    private func lock(deadline: ContinuousClock.Instant?) -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) + 1, ordering: .relaxed)
            return true
        }
        let checked = DiagnosticsSwitch.isOn(.lockOrder)
        if checked { LockOrder.acquire(label, kind: "TKRecursiveLock") }
        if !raw.tryLockFast(tid) {
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: label.name ?? "TKRecursiveLock") }
            let start = Contention.start()
            let result = raw.lockSlow(tid, deadline: deadline)
            Contention.lockWaited(label, kind: "TKRecursiveLock", since: start)
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.end, self, name: label.name ?? "TKRecursiveLock") }
            switch result {
            case .acquired: break
            case .timedOut:
                if checked { LockOrder.release(label) }
                return false
            case .heldByCaller: preconditionFailure("owner checked above")
            }
        }
        depth.store(1, ordering: .relaxed)
        return true
    }
}
