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

    // lock() and unlock() are inlinable and take at most one atomic read-modify-write each: the
    // first lock is a CAS 0 → tid, the last unlock a CAS tid → 0, re-entry and an inner unlock
    // none (the owner check is a plain load of a word no other thread can make equal to our id).
    // Contention and misuse are out of line.

    @inlinable
    public func lock() {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid { depth.store(depth.load(ordering: .relaxed) + 1, ordering: .relaxed); return }
        if raw.tryLockFast(tid) {
            depth.store(1, ordering: .relaxed)
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKRecursiveLock") }
            return
        }
        lockContended()
    }

    @usableFromInline
    func lockContended() {
        _ = lock(deadline: nil)
    }

    @inlinable
    public func unlock() {
        let tid = SystemCall.currentThreadID
        // The last unlock. The owner check is a plain load (no other thread can make the word
        // equal our id); the depth is cleared before the word is released, since the next owner
        // writes it as soon as it has the lock.
        if raw.owner() == tid, depth.load(ordering: .relaxed) == 1 {
            depth.store(0, ordering: .relaxed)
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
            if !raw.tryUnlockFast(tid) { _ = raw.unlockSlow(tid) }   // parked waiters: wake one
            return
        }
        unlockSlow(tid)
    }

    /// An inner unlock, or an unlock by a thread that does not hold the lock (misuse).
    @usableFromInline
    func unlockSlow(_ tid: UInt32) {
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

    @inlinable
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

    /// Takes the lock only if nobody holds it, the caller included (no re-entry), and nobody is
    /// parked for it: `synchronized` rebinding a slot to another token (Synchronized.swift).
    func tryLockUnheld() -> Bool {
        guard raw.tryLockFast(SystemCall.currentThreadID) else { return false }
        depth.store(1, ordering: .relaxed)
        return true
    }

    /// Whether some thread holds the lock (a snapshot; tests and table statistics).
    var isHeld: Bool { raw.word.pointer.pointee.load(ordering: .relaxed) != 0 }

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
