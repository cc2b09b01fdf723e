// TKLock: NSLock. A non-recursive mutex on RawMutex; thread-safe. Misuse (unlock by a thread that
// does not hold it, locking twice on one thread) stops the process with a message.

// safety: its fields are a mutex and a name, each thread-safe.
/// A mutual-exclusion lock (NSLock). Not recursive: locking it again on the thread that holds it is
/// a detected deadlock and stops the process with a message, as does unlocking it from a thread
/// that does not hold it.
public final class TKLock: TKLocking, @unchecked Sendable {
    @usableFromInline let raw = RawMutex()
    @usableFromInline let label = LockName()

    /// Creates an unlocked lock with no name, like `NSLock()`.
    public init() {}

    /// A name for diagnostics: misuse messages, lock-order reports, contention counters and
    /// traces name the lock by it (unnamed locks are named by address). Thread-safe.
    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    // lock() and unlock() are inlinable so the uncontended path compiles into the caller: one
    // thread-local load and one CAS each, as with Synchronization.Mutex, plus one relaxed load and
    // a branch for the lock-order checker (docs/Diagnostics.md §1).

    /// Takes the lock, blocking until it is free, like `NSLock.lock()`. Locking it again on the
    /// thread that holds it would deadlock: it stops the process with a message instead.
    @inlinable
    public func lock() {
        let tid = SystemCall.currentThreadID
        if raw.tryLockFast(tid) {
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKLock") }
            return
        }
        lockContended(tid)
    }

    /// Releases the lock, waking one waiter if any. Only the thread that locked it may unlock it:
    /// any other caller (or a second unlock) stops the process with a message.
    @inlinable
    public func unlock() {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
        let tid = SystemCall.currentThreadID
        if raw.tryUnlockFast(tid) { return }
        unlockContended(tid)
    }

    @usableFromInline
    func lockContended(_ tid: UInt32) {
        // Checked before waiting: the cycle is reported even if this wait is the deadlock.
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKLock") }
        let start = Contention.start()
        _ = lockSlow(tid, deadline: nil)
        Contention.lockWaited(label, kind: "TKLock", since: start)
    }

    @usableFromInline
    func unlockContended(_ tid: UInt32) {
        if raw.unlockSlow(tid) { return }
        misuse(
            "\(label.describe("TKLock", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
                + "Fix: unlock on the thread that locked it, once per lock(); to hand work between threads use "
                + "TKCondition, TKConditionLock or TKDispatchSemaphore.")
    }

    /// Takes the lock if it is free now; never blocks.
    public func tryLock() -> Bool {
        guard raw.tryLockFast(SystemCall.currentThreadID) else { return false }
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKLock", isTry: true) }
        return true
    }

    /// Waits for the lock until `deadline`; false when it was not acquired in time.
    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        let tid = SystemCall.currentThreadID
        let checked = DiagnosticsSwitch.isOn(.lockOrder)
        if checked { LockOrder.acquire(label, kind: "TKLock") }
        if raw.tryLockFast(tid) { return true }
        let start = Contention.start()
        let acquired = lockSlow(tid, deadline: deadline)
        Contention.lockWaited(label, kind: "TKLock", since: start)
        if !acquired && checked { LockOrder.release(label) }
        return acquired
    }

    private func lockSlow(_ tid: UInt32, deadline: ContinuousClock.Instant?) -> Bool {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: label.name ?? "TKLock") }
        let waiting = WaitGraph.begin(self, .lock, "TKLock.lock()") // who waits for whom (§6)
        let result = raw.lockSlow(tid, deadline: deadline)
        WaitGraph.end(waiting)
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.end, self, name: label.name ?? "TKLock") }
        switch result {
        case .acquired: return true
        case .timedOut: return false
        case .heldByCaller:
            misuse(
                "\(label.describe("TKLock", self)).lock() called again on thread \(tid), which already holds it: "
                    + "this would deadlock. Fix: unlock before locking again, or use TKRecursiveLock for re-entrant code.")
        }
    }
}
