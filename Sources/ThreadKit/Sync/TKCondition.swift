// TKCondition: NSCondition, a lock and a condition variable in one object. Thread-safe; `wait`
// must be called by the thread holding the lock.

// safety: its fields are a mutex, a condition and a name, each thread-safe.
/// A condition variable with its own lock (NSCondition). Lock it, test your predicate, and `wait`
/// in a loop until the predicate holds: like POSIX condition variables, `wait` may return
/// spuriously. `signal` wakes one waiter, `broadcast` all; both may be called with or without
/// the lock held.
public final class TKCondition: TKLocking, @unchecked Sendable {
    private let raw = RawMutex()
    private let condition = RawCondition()
    private let label = LockName()

    /// Creates a condition whose lock is free, like `NSCondition()`.
    public init() {}

    /// A name for diagnostics: misuse messages, lock-order reports, contention counters and
    /// traces name the condition by it. Thread-safe.
    public var name: String? {
        get { label.name }
        set { label.name = newValue }
    }

    /// Takes the condition's lock, blocking until it is free. Not recursive: locking it again on
    /// the thread that holds it stops the process with a message.
    public func lock() {
        let tid = SystemCall.currentThreadID
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKCondition") }
        if raw.tryLockFast(tid) { return }
        let start = Contention.start()
        let waiting = WaitGraph.begin(self, .lock, "TKCondition.lock()") // who waits for whom (§6)
        let result = raw.lockSlow(tid, deadline: nil)
        WaitGraph.end(waiting)
        Contention.lockWaited(label, kind: "TKCondition", since: start)
        if result == .heldByCaller {
            misuse(
                "\(label.describe("TKCondition", self)).lock() called again on thread \(tid), which already holds it: "
                    + "this would deadlock. Fix: unlock before locking again.")
        }
    }

    /// Releases the condition's lock. A call from a thread that does not hold it stops the process
    /// with a message.
    public func unlock() {
        let tid = SystemCall.currentThreadID
        if raw.unlock(tid) {
            if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
            return
        }
        misuse(
            "\(label.describe("TKCondition", self)).unlock() called on thread \(tid), but \(raw.ownerDescription()). "
                + "Fix: unlock on the thread that locked it, once per lock().")
    }

    /// Releases the lock, waits for a signal, and takes the lock again before returning.
    public func wait() {
        let tid = checkHeld("wait()")
        let waiting = WaitGraph.begin(self, .condition, "TKCondition.wait()") // who waits for whom (§6)
        _ = condition.wait(raw, tid, deadline: nil)
        WaitGraph.end(waiting)
    }

    /// As `wait()`, giving up at `deadline`: returns false when it timed out (never before the
    /// deadline). The lock is held again on return either way.
    public func wait(until deadline: ContinuousClock.Instant) -> Bool {
        let tid = checkHeld("wait(until:)")
        let waiting = WaitGraph.begin(self, .condition, "TKCondition.wait(until:)") // who waits for whom (§6)
        defer { WaitGraph.end(waiting) }
        return condition.wait(raw, tid, deadline: deadline)
    }

    /// Wakes one thread waiting in `wait()` or `wait(until:)`, if any, like `NSCondition.signal()`.
    /// May be called with or without the lock held.
    public func signal() { condition.signal() }
    /// Wakes every thread waiting on the condition, like `NSCondition.broadcast()`. May be called
    /// with or without the lock held.
    public func broadcast() { condition.broadcast() }

    private func checkHeld(_ call: String) -> UInt32 {
        let tid = SystemCall.currentThreadID
        guard raw.owner() == tid else {
            misuse(
                "\(label.describe("TKCondition", self)).\(call) called on thread \(tid) without holding its lock "
                    + "(\(raw.ownerDescription())). Fix: lock() first, wait in a loop on your predicate, then unlock().")
        }
        return tid
    }
}

extension TKCondition: WaitTarget {
    var waitDescription: String { label.describe("TKCondition", self) }
    /// The lock's owner (for `lock()`; a `wait()` has no holder, only a signaller to come).
    var waitHolder: WaitHolder { raw.waitHolder }
}
