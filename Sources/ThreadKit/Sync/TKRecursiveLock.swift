// TKRecursiveLock: NSRecursiveLock. A RawMutex plus a depth that only the holding thread writes.
import Synchronization

// safety: the lock count is written only by the holder of `raw` (see its note); the rest is
// thread-safe.
/// A lock the holding thread may take again; it is released when every `lock()` has been matched
/// by an `unlock()`. Unlocking from a thread that does not hold it stops the process with a message.
public final class TKRecursiveLock: TKLocking, @unchecked Sendable {
    @usableFromInline let raw = RawMutex()
    @usableFromInline let label = LockName()
    /// How many times the holder has locked. Written only by the thread that holds `raw` (every
    /// acquisition stores 1 before anything reads it as the holder; the last unlock need not clear
    /// it). Read by the holder, and by `unlock()` on any thread before it knows whether it holds
    /// the lock: such a read decides nothing by itself, since the owner check or the CAS tid → 0
    /// that follows fails for a thread that does not hold the lock. The mutex's acquire/release
    /// order it between successive holders, so relaxed suffices; an atomic rather than a plain var
    /// so those foreign reads are not data races (and to skip Swift's dynamic exclusivity checks).
    @usableFromInline let depth = Atomic<Int>(0)

    /// Creates an unlocked lock with no name, like `NSRecursiveLock()`.
    public init() {}

    /// A name for diagnostics: misuse messages, lock-order reports, contention counters and
    /// traces name the lock by it (unnamed locks are named by address). Thread-safe.
    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    // lock() and unlock() are inlinable and take at most one atomic read-modify-write each, at
    // any depth: the first lock is a CAS 0 → tid, the last unlock a CAS tid → 0, re-entry and an
    // inner unlock none (a plain load of the owner word, which no other thread can make equal to
    // our id, and a plain store of the depth). The thread id is one thread-local load
    // (SystemCall.currentThreadID). Contention, misuse and the lock-order hook of the last unlock
    // are out of line.

    /// Takes the lock, blocking until it is free; the thread that holds it takes it again at once
    /// (one more `unlock()` is then owed).
    @inlinable
    public func lock() {
        let tid = SystemCall.currentThreadID
        // Re-entry. Relaxed load: the owner field holds our id only if our own acquiring CAS put
        // it there and our own unlock has not taken it out, and a thread always reads its own
        // latest write to a location or a later one, so the test is exact for the caller. Depth
        // cannot overflow (2^63 nested locks), hence the wrapping add.
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
            return
        }
        // First lock: CAS 0 → tid, acquiring (RawMutex.tryLockFast).
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

    /// Undoes one `lock()`; the lock is released when every `lock()` of the holder is matched.
    /// A call from a thread that does not hold it stops the process with a message.
    @inlinable
    public func unlock() {
        let tid = SystemCall.currentThreadID
        // Relaxed: our own depth if we hold the lock (we wrote it last); any value otherwise, and
        // then the checks below fail and unlockSlow reports the misuse.
        let held = depth.load(ordering: .relaxed)
        if held == 1 {
            // The last unlock: one CAS tid → 0 (releasing: publishes the critical section to the
            // next acquirer, RawMutex.tryUnlockFast) that is also the ownership check, since only
            // the holder's id can be in the word. The depth is left at 1: the next holder stores 1
            // itself. Out of line when the CAS fails (parked waiters to wake, or not the holder) or
            // the lock-order checker must hear of the release before it happens.
            if !DiagnosticsSwitch.isOn(.lockOrder), raw.tryUnlockFast(tid) { return }
        } else if held > 1, raw.owner() == tid {
            // An inner unlock: we hold it (relaxed owner load as in lock()), the depth is ours.
            depth.store(held &- 1, ordering: .relaxed)
            return
        }
        unlockSlow(tid)
    }

    /// The last unlock with waiters parked or the lock-order checker on, or an unlock by a thread
    /// that does not hold the lock (misuse).
    @usableFromInline
    func unlockSlow(_ tid: UInt32) {
        guard raw.owner() == tid else {
            misuse(
                "\(label.describe("TKRecursiveLock", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
                    + "Fix: balance every lock() with one unlock() on the same thread.")
        }
        let remaining = depth.load(ordering: .relaxed) - 1
        depth.store(remaining, ordering: .relaxed)
        if remaining == 0 {
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
            _ = raw.unlock(tid) // CAS tid → 0, or with parked waiters a releasing store and a wake
        }
    }

    /// Takes the lock if it is free or already held by the caller (re-entry); never blocks.
    /// Returns whether the caller now holds it.
    @inlinable
    public func tryLock() -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
            return true
        }
        guard raw.tryLockFast(tid) else { return false }
        depth.store(1, ordering: .relaxed)
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKRecursiveLock", isTry: true) }
        return true
    }

    /// tryLock without the lock-order hook: `synchronized`'s fast path, which runs only while the
    /// checker is off (Synchronized.swift). Orderings as in lock().
    @inlinable @inline(__always)
    func tryLockWithoutOrderCheck() -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
            return true
        }
        guard raw.tryLockFast(tid) else { return false }
        depth.store(1, ordering: .relaxed)
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

    /// Takes the lock, waiting no later than `deadline`; false when it timed out (never before the
    /// deadline). Re-entry by the holder succeeds at once.
    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        lock(deadline: deadline)
    }

    private func lock(deadline: ContinuousClock.Instant?) -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth.store(depth.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
            return true
        }
        let checked = DiagnosticsSwitch.isOn(.lockOrder)
        if checked { LockOrder.acquire(label, kind: "TKRecursiveLock") }
        if !raw.tryLockFast(tid) {
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: label.name ?? "TKRecursiveLock") }
            let start = Contention.start()
            let waiting = WaitGraph.begin(self, .lock, "TKRecursiveLock.lock()") // who waits for whom (§6)
            let result = raw.lockSlow(tid, deadline: deadline)
            WaitGraph.end(waiting)
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
