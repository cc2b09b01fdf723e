// TKDispatchSemaphore: DispatchSemaphore (SPEC §6). Thread-safe. `value` counts available units
// (negative: minus the number of waiters); `wakeups` is the futex word holding tokens that signal
// hands to waiters.
import Synchronization

/// libdispatch's design: `wait` decrements `value` and returns at once if it was positive; else the
/// caller is a waiter and takes a token from `wakeups` (spinning briefly, then parking). `signal`
/// increments `value`; if it was negative a waiter exists, and signal adds one token and wakes one
/// thread. A waiter that times out gives its unit back by CAS-ing `value` up while it is still
/// negative; if it is not, a signal has already counted it, so it takes that token (waiting for
/// it without a deadline: the signaller is about to deposit it).
public final class TKDispatchSemaphore: @unchecked Sendable {
    private let value: Atomic<Int>
    private let wakeups = FutexWord(0)

    /// A semaphore with `value` units. A negative value is a misuse that stops the process.
    public init(value: Int) {
        if value < 0 {
            misuse("TKDispatchSemaphore(value: \(value)): the initial value must be zero or more. "
                   + "Fix: pass 0 to signal events, or the number of available resources.")
        }
        self.value = Atomic(value)
    }

    deinit { wakeups.deallocate() }

    /// Releases one unit; wakes one waiter if any. Returns 1 if a waiter was woken, else 0.
    /// Sequentially consistent with `wait`'s decrement (the Dekker pair between value and tokens).
    @discardableResult
    public func signal() -> Int {
        let old = value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        if old >= 0 { return 0 }
        // Releasing: the waiter that takes this token (acquiring CAS) sees what the signaller did.
        wakeups.pointer.pointee.wrappingAdd(1, ordering: .releasing)
        Parking.unparkOne(wakeups)
        return 1
    }

    /// Takes one unit, waiting for a `signal()` if none is available.
    public func wait() {
        if value.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue > 0 { return }
        _ = waitSlow(deadline: nil)
    }

    /// As `wait()`, giving up at `deadline` (never early).
    public func wait(until deadline: ContinuousClock.Instant) -> TKDispatchTimeoutResult {
        if value.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue > 0 { return .success }
        return waitSlow(deadline: deadline) ? .success : .timedOut
    }

    private func waitSlow(deadline: ContinuousClock.Instant?) -> Bool {
        var spin = SpinWait(limit: DispatchSpin.semaphore)
        while true {
            if takeToken() { return true }
            if spin.spin() { continue }
            if !Parking.park(wakeups, expected: 0, deadline: deadline) {
                if takeToken() { return true }
                // Timed out: give the unit back unless a signal already counted this waiter.
                var v = value.load(ordering: .sequentiallyConsistent)
                while v < 0 {
                    let (exchanged, original) = value.compareExchange(expected: v, desired: v + 1, ordering: .sequentiallyConsistent)
                    if exchanged { return false }
                    v = original
                }
                // A signal is depositing our token: take it.
                while !takeToken() { _ = Parking.park(wakeups, expected: 0) }
                return true
            }
        }
    }

    /// Takes one token if any. Acquiring: pairs with the releasing add in `signal`.
    private func takeToken() -> Bool {
        var tokens = wakeups.pointer.pointee.load(ordering: .relaxed)
        while tokens > 0 {
            let (exchanged, original) = wakeups.pointer.pointee.compareExchange(expected: tokens, desired: tokens - 1, ordering: .acquiring)
            if exchanged { return true }
            tokens = original
        }
        return false
    }
}
