// TKLock: NSLock. A non-recursive mutex on RawMutex; thread-safe. Misuse (unlock by a thread that
// does not hold it, locking twice on one thread) stops the process with a message.

/// A mutual-exclusion lock (NSLock). Not recursive: locking it again on the thread that holds it is
/// a detected deadlock and stops the process with a message, as does unlocking it from a thread
/// that does not hold it.
public final class TKLock: TKLocking, @unchecked Sendable {
    @usableFromInline let raw = RawMutex()
    private let label = LockName()

    public init() {}
    deinit { raw.deallocate() }

    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    // lock() and unlock() are inlinable so the uncontended path compiles into the caller: one
    // thread-local load and one CAS each, as with Synchronization.Mutex.

    @inlinable
    public func lock() {
        let tid = SystemCall.currentThreadID
        if raw.tryLockFast(tid) { return }
        lockContended(tid)
    }

    @inlinable
    public func unlock() {
        let tid = SystemCall.currentThreadID
        if raw.tryUnlockFast(tid) { return }
        unlockContended(tid)
    }

    @usableFromInline
    func lockContended(_ tid: UInt32) {
        _ = lockSlow(tid, deadline: nil)
    }

    @usableFromInline
    func unlockContended(_ tid: UInt32) {
        if raw.unlockSlow(tid) { return }
        misuse("\(label.describe("TKLock", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
               + "Fix: unlock on the thread that locked it, once per lock(); to hand work between threads use "
               + "TKCondition, TKConditionLock or TKDispatchSemaphore.")
    }

    /// Takes the lock if it is free now; never blocks.
    public func tryLock() -> Bool {
        raw.tryLockFast(SystemCall.currentThreadID)
    }

    /// Waits for the lock until `deadline`; false when it was not acquired in time.
    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.tryLockFast(tid) { return true }
        return lockSlow(tid, deadline: deadline)
    }

    private func lockSlow(_ tid: UInt32, deadline: ContinuousClock.Instant?) -> Bool {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: label.name ?? "TKLock") }
        let result = raw.lockSlow(tid, deadline: deadline)
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.end, self, name: label.name ?? "TKLock") }
        switch result {
        case .acquired: return true
        case .timedOut: return false
        case .heldByCaller:
            misuse("\(label.describe("TKLock", self)).lock() called again on thread \(tid), which already holds it: "
                   + "this would deadlock. Fix: unlock before locking again, or use TKRecursiveLock for re-entrant code.")
        }
    }
}
