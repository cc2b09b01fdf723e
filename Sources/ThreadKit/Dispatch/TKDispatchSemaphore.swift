// TKDispatchSemaphore: DispatchSemaphore (SPEC §6), and its `acquire()` for tasks
// (docs/Concurrency.md §4). Thread-safe. `value` counts available units (negative: minus the number
// of waiters a signal has not yet served); `wakeups` is the futex word holding tokens that signals
// hand to blocked threads; `asyncWaiters` is the FIFO of suspended tasks, and its mutex also
// guards `debt`. Lock order: the waiters' mutex is a leaf here (a wake syscall may be made under
// it, in the rare give-back of `withdrawLocked`).
import Synchronization

/// libdispatch's design, with tasks beside threads:
///
/// - `wait` / `acquire` decrement `value` and return at once if it was positive. Otherwise the
///   caller is a waiter and needs a *grant*: a thread takes a token from `wakeups` (spinning
///   briefly, then parking); a task suspends in `asyncWaiters` (or, at its admission, takes a
///   token that is already there).
/// - `signal` increments `value`; if it was negative a waiter exists, and the signal makes one
///   grant, under the waiters' mutex, in this order: pay one `debt` (below) by giving the unit
///   back, as a new signal; else resume the first suspended task (FIFO); else add a token and
///   wake one thread.
/// - A waiter that gives up (a thread's deadline, a task's cancellation) withdraws under the
///   waiters' mutex: it CASes `value` up while it is negative (the unit was never counted for
///   it). If `value` is not negative, a signal has already counted it and its grant is in flight
///   or in the pot: a token in the pot is taken (a thread keeps it and succeeds; a task gives it
///   back); with none there, `debt` goes up and the grant in flight, when it takes the mutex,
///   pays it by giving the unit back. A task resumed with a unit whose task was cancelled
///   meanwhile gives it back with `signal()` before throwing: a cancelled `acquire` takes no unit.
///
/// Invariants. (1) Each signal that finds `value` negative makes exactly one grant, and each
/// waiter consumes exactly one grant or withdraws exactly once: no unit is lost or made up.
/// (2) Under the waiters' mutex, tokens in the pot imply no queued task and no debt: tokens are
/// added only when both are empty, a task's admission takes a waiting token before it queues, and
/// a withdrawal takes a waiting token before it adds debt. So a token never waits for a consumer
/// that does not look at the pot, and no grant is stranded.
///
/// Orderings. `value`: sequentially consistent everywhere (the Dekker pair between a waiter's
/// decrement and a signal's increment, as in libdispatch). Tokens: a releasing add in the signal,
/// an acquiring CAS in the taker (what the signaller did before is visible to the thread it
/// wakes). Tasks are handed their unit through the waiters' mutex and the continuation.
public final class TKDispatchSemaphore: @unchecked Sendable {
    private let value: Atomic<Int>
    private let wakeups = FutexWord(0)
    /// Suspended `acquire()` calls; its mutex also guards `debt`.
    private let asyncWaiters = AsyncWaiters<Void>()
    /// Withdrawn waiters that a signal had already counted: the next grants give their units back.
    private var debt = 0   // guarded by asyncWaiters' mutex

    /// A semaphore with `value` units. A negative value is a misuse that stops the process.
    public init(value: Int) {
        if value < 0 {
            misuse("TKDispatchSemaphore(value: \(value)): the initial value must be zero or more. "
                   + "Fix: pass 0 to signal events, or the number of available resources.")
        }
        self.value = Atomic(value)
    }

    deinit { wakeups.deallocate() }

    /// Releases one unit; hands it to one waiter (thread or task) if any. Returns 1 if a waiter
    /// was given the unit, else 0.
    @discardableResult
    public func signal() -> Int {
        let old = value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        if old >= 0 { return 0 }
        return signalSlow()
    }

    /// A waiter exists: make its grant (see the type's comment).
    private func signalSlow() -> Int {
        enum Grant { case task(AsyncWaiters<Void>.Continuation), thread, givenBack }
        let grant = asyncWaiters.withLock { () -> Grant in
            while debt > 0 {
                debt -= 1
                // The withdrawn waiter's unit goes back, as a signal of its own; if that signal
                // finds a waiter too, it makes a grant in turn.
                if value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue >= 0 { return .givenBack }
            }
            if let task = asyncWaiters.popFirstLocked() { return .task(task) }
            // Releasing: the waiter that takes this token (acquiring CAS) sees what the signaller did.
            wakeups.pointer.pointee.wrappingAdd(1, ordering: .releasing)
            return .thread
        }
        switch grant {
        case .task(let continuation):
            continuation.resume(returning: ())
            return 1
        case .thread:
            Parking.unparkOne(wakeups)
            return 1
        case .givenBack:
            return 0
        }
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
                // Timed out: leave, unless a token that is ours is already in the pot.
                return asyncWaiters.withLock { withdrawLocked(keepToken: true) }
            }
        }
    }

    /// Takes one unit for the calling task, suspending it (not its thread) until a `signal()`
    /// if none is available. Suspended tasks are served in the order they began waiting. A
    /// cancelled task stops waiting at once and throws `CancellationError` without taking a unit
    /// (a unit handed to it as it was cancelled is passed on). With a unit available it returns at
    /// once, without suspending, even in a cancelled task: there is nothing to wait for.
    public func acquire() async throws {
        if value.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue > 0 { return }
        try await acquireSlow()
    }

    private func acquireSlow() async throws {
        try await asyncWaiters.suspend(
            admit: { () -> Void? in takeToken() ? () : nil },
            withdraw: { [self] in _ = withdrawLocked(keepToken: false) })
        if Task.isCancelled {
            // The unit came as the task was cancelled: pass it on.
            signal()
            throw CancellationError()
        }
    }

    /// A waiter leaves without being granted (waiters' mutex held). Returns true if it took a
    /// token and keeps it (`keepToken`: a thread whose deadline passed as its grant arrived).
    private func withdrawLocked(keepToken: Bool) -> Bool {
        var v = value.load(ordering: .sequentiallyConsistent)
        while v < 0 {
            let (exchanged, original) = value.compareExchange(expected: v, desired: v + 1, ordering: .sequentiallyConsistent)
            if exchanged { return false }
            v = original
        }
        // A signal has counted this waiter: its grant is in the pot or on its way here.
        if takeToken() {
            if keepToken { return true }
            // Give it back as a signal would. Tokens were in the pot, so no task is queued and no
            // debt is owed (invariant 2): the only waiter it can be for is a thread.
            if value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue < 0 {
                wakeups.pointer.pointee.wrappingAdd(1, ordering: .releasing)
                Parking.unparkOne(wakeups)
            }
            return false
        }
        debt += 1
        return false
    }

    /// Takes one token if any. Acquiring: pairs with the releasing add in `signalSlow`.
    private func takeToken() -> Bool {
        var tokens = wakeups.pointer.pointee.load(ordering: .relaxed)
        while tokens > 0 {
            let (exchanged, original) = wakeups.pointer.pointee.compareExchange(expected: tokens, desired: tokens - 1, ordering: .acquiring)
            if exchanged { return true }
            tokens = original
        }
        return false
    }

    /// Tasks suspended in `acquire()` now (tests).
    var asyncWaiterCount: Int { asyncWaiters.count }

    /// The current value (tests): available units, or minus the waiters not yet served.
    var currentValue: Int { value.load(ordering: .sequentiallyConsistent) }
}
