// TKRecursiveLock: NSRecursiveLock. A RawMutex plus a depth that only the holding thread touches.

/// A lock the holding thread may take again; it is released when every `lock()` has been matched
/// by an `unlock()`. Unlocking from a thread that does not hold it stops the process with a message.
public final class TKRecursiveLock: TKLocking, @unchecked Sendable {
    private let raw = RawMutex()
    private let label = LockName()
    /// How many times the holder has locked. Read and written only by the thread that holds `raw`;
    /// the mutex's acquire/release order it between successive holders.
    private var depth = 0

    public init() {}
    deinit { raw.deallocate() }

    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    public func lock() {
        _ = lock(deadline: nil)
    }

    public func unlock() {
        let tid = SystemCall.currentThreadID
        guard raw.owner() == tid else {
            misuse("\(label.describe("TKRecursiveLock", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
                   + "Fix: balance every lock() with one unlock() on the same thread.")
        }
        depth -= 1
        if depth == 0 { _ = raw.unlock(tid) }
    }

    public func tryLock() -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth += 1
            return true
        }
        guard raw.tryLockFast(tid) else { return false }
        depth = 1
        return true
    }

    public func lock(before deadline: ContinuousClock.Instant) -> Bool {
        lock(deadline: deadline)
    }

    private func lock(deadline: ContinuousClock.Instant?) -> Bool {
        let tid = SystemCall.currentThreadID
        if raw.owner() == tid {
            depth += 1
            return true
        }
        if !raw.tryLockFast(tid) {
            switch raw.lockSlow(tid, deadline: deadline) {
            case .acquired: break
            case .timedOut: return false
            case .heldByCaller: preconditionFailure("owner checked above")
            }
        }
        depth = 1
        return true
    }
}
