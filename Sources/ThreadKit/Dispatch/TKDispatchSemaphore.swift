// TKDispatchSemaphore: DispatchSemaphore (SPEC §6), and its `acquire()` for tasks
// (docs/Concurrency.md §4). Thread-safe. `value` counts available units (negative: minus the number
// of waiters a signal has not yet served). Waiters that found no unit first spin on `wakeups`, the
// pot of units signalled while nobody was queued; then they queue: threads in `threads` (each
// parked on its own node's word), tasks in `asyncWaiters`. The waiters' mutex (`asyncWaiters`'s)
// guards both queues, `debt` and `tickets`. Lock order: the waiters' mutex is a leaf here; wakes
// are made after it is released.
import Synchronization

/// libdispatch's counting design, with FIFO hand-off to queued waiters and tasks beside threads:
///
/// - `wait` / `acquire` decrement `value` and return at once if it was positive. Otherwise the
///   caller is a waiter and needs a *grant*. A thread first spins briefly (about
///   `DispatchSpin.semaphore` polls), taking a unit from the pot if one lands there; then, under
///   the waiters' mutex, it takes a unit from the pot or queues with the next ticket and parks on
///   its own node. A task takes a unit from the pot at its admission or queues with a ticket.
/// - `signal` increments `value`; if it was negative a waiter exists, and the signal makes one
///   grant, under the waiters' mutex, in this order: pay one `debt` (below) by giving the unit
///   back, as a new signal; else hand the unit to the queued waiter with the lowest ticket, thread
///   or task (FIFO: parked waiters are served in the order they queued, as the seeds say); else
///   (every waiter is still spinning) put it in the pot.
/// - A waiter that gives up (a thread's deadline, a task's cancellation) withdraws under the
///   waiters' mutex: a thread whose node was granted meanwhile keeps the unit; otherwise it leaves
///   the queue and CASes `value` up while it is negative (the unit was never counted for it). If
///   `value` is not negative, a signal has already counted it and its grant is in flight or in the
///   pot: a unit in the pot is taken (a thread keeps it and succeeds; a task gives it back); with
///   none there, `debt` goes up and the grant in flight, when it takes the mutex, pays it by giving
///   the unit back. A task resumed with a unit whose task was cancelled meanwhile gives it back
///   with `signal()` before throwing: a cancelled `acquire` takes no unit.
///
/// What a spinning waiter may do (barging): while it spins it is not queued, so a unit signalled
/// while no waiter is queued goes to the pot and whichever spinning waiter looks first takes it,
/// which may be one that arrived a moment after another spinner. A spinning waiter never takes a
/// unit ahead of a queued one: the pot is only filled when nobody is queued, and a waiter about to
/// queue takes a unit from the pot instead. Once queued, waiters are served strictly first come,
/// first served.
///
/// Invariants. (1) Each signal that finds `value` negative makes exactly one grant, and each
/// waiter consumes exactly one grant or withdraws exactly once: no unit is lost or made up.
/// (2) Under the waiters' mutex, units in the pot imply no queued thread or task and no debt: the
/// pot is filled only when all three are empty, a waiter takes a unit from the pot before it
/// queues, and a withdrawal takes one before it adds debt. So a unit never waits in the pot for a
/// consumer that does not look there, and no grant is stranded.
///
/// Orderings. `value`: sequentially consistent everywhere (the Dekker pair between a waiter's
/// decrement and a signal's increment, as in libdispatch). The pot: a releasing add in the signal,
/// an acquiring CAS in the taker. A queued thread's node: a releasing store of "granted" in the
/// signal (under the mutex), an acquiring load in the parked thread. Tasks are handed their unit
/// through the waiters' mutex and the continuation.
public final class TKDispatchSemaphore: @unchecked Sendable {
    // safety: the value and wake-ups are atomic; the thread queue, debt and tickets only
    // under the async waiters' mutex.
    private let value: Atomic<Int>
    /// Units signalled while no waiter was queued, taken by spinning waiters.
    private let wakeups = FutexWord(0)
    /// The thread that signalled last, for thread dumps (docs/Diagnostics.md §6): stored only while
    /// waits are recorded. Relaxed: a hint, read by a dumping thread.
    private let lastSignaller = Atomic<UInt32>(0)
    /// Suspended `acquire()` calls; its mutex also guards `threads`, `debt` and `tickets`.
    private let asyncWaiters = AsyncWaiters<Void>()
    /// Threads parked in `wait`, first come first: each waits on its node's word.
    private var threads = LinkedNodeList<ThreadWaiter>() // guarded by asyncWaiters' mutex
    /// Withdrawn waiters that a signal had already counted: the next grants give their units back.
    private var debt = 0 // guarded by asyncWaiters' mutex
    /// The next queue ticket, shared by threads and tasks so that they are served in one order.
    private var tickets: UInt64 = 0 // guarded by asyncWaiters' mutex

    /// A semaphore with `value` units. A negative value is a misuse that stops the process.
    public init(value: Int) {
        if value < 0 {
            misuse(
                "TKDispatchSemaphore(value: \(value)): the initial value must be zero or more. "
                    + "Fix: pass 0 to signal events, or the number of available resources.")
        }
        self.value = Atomic(value)
    }

    /// Releases one unit; hands it to one waiter (thread or task) if any. Returns 1 if a waiter
    /// was given the unit, else 0.
    @discardableResult
    public func signal() -> Int {
        if DiagnosticsSwitch.isOn(WaitGraph.recording) { lastSignaller.store(SystemCall.currentThreadID, ordering: .relaxed) }
        let old = value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        if old >= 0 {
            if old == Int.max { signalOverflow() }
            return 0
        }
        return signalSlow()
    }

    /// One signal more than Int.max units: the count wrapped to "Int.min waiters" and nothing it
    /// says can be trusted any more.
    private func signalOverflow() -> Never {
        misuse(
            "TKDispatchSemaphore.signal(): the semaphore already had Int.max units; one more overflows its count. "
                + "Fix: balance signal() with wait(), or start from a value well below Int.max.")
    }

    /// A waiter exists: make its grant (see the type's comment).
    private func signalSlow() -> Int {
        enum Grant { case task(AsyncWaiters<Void>.Continuation), thread(ThreadWaiter), pot, givenBack }
        let grant = asyncWaiters.withLock { () -> Grant in
            while debt > 0 {
                debt -= 1
                // The withdrawn waiter's unit goes back, as a signal of its own; if that signal
                // finds a waiter too, it makes a grant in turn.
                if value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue >= 0 { return .givenBack }
            }
            if let thread = threads.first, thread.ticket < asyncWaiters.firstTicketLocked ?? .max {
                threads.remove(thread)
                // Releasing: the thread's acquiring load sees what the signaller did.
                thread.word.pointer.pointee.store(ThreadWaiter.granted, ordering: .releasing)
                return .thread(thread)
            }
            if let task = asyncWaiters.popFirstLocked() { return .task(task) }
            // Every waiter still spins. Releasing: pairs with the taker's acquiring CAS.
            wakeups.pointer.pointee.wrappingAdd(1, ordering: .releasing)
            return .pot
        }
        switch grant {
        case .task(let continuation):
            continuation.resume(returning: ())
            return 1
        case .thread(let waiter):
            Parking.unparkOne(waiter.word)
            return 1
        case .pot:
            return 1
        case .givenBack:
            return 0
        }
    }

    /// Takes one unit, waiting for a `signal()` if none is available.
    public func wait() {
        if value.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue > 0 { return }
        let waiting = WaitGraph.begin(self, .semaphore, "TKDispatchSemaphore.wait()") // who waits for whom (§6)
        _ = waitSlow(deadline: nil)
        WaitGraph.end(waiting)
    }

    /// As `wait()`, giving up at `deadline` (never early).
    public func wait(until deadline: ContinuousClock.Instant) -> TKDispatchTimeoutResult {
        if value.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue > 0 { return .success }
        let waiting = WaitGraph.begin(self, .semaphore, "TKDispatchSemaphore.wait(until:)") // who waits for whom (§6)
        defer { WaitGraph.end(waiting) }
        return waitSlow(deadline: deadline) ? .success : .timedOut
    }

    /// Spin on the pot, then queue and park on an own node until granted or `deadline`.
    private func waitSlow(deadline: ContinuousClock.Instant?) -> Bool {
        var spin = SpinWait(limit: DispatchSpin.semaphore)
        while spin.spin() {
            if takeToken() { return true }
        }
        let queued = asyncWaiters.withLock { () -> ThreadWaiter? in
            if takeToken() { return nil }
            let waiter = ThreadWaiter(ticket: nextTicketLocked())
            threads.append(waiter)
            return waiter
        }
        guard let waiter = queued else { return true }
        while true {
            if waiter.isGranted { return true }
            if !Parking.park(waiter.word, expected: ThreadWaiter.waiting, deadline: deadline, retryThreadStarts: true) {
                return asyncWaiters.withLock { () -> Bool in
                    // Granted as the deadline passed: the unit is ours.
                    if waiter.isGranted { return true }
                    threads.remove(waiter)
                    return withdrawLocked(keepToken: true)
                }
            }
        }
    }

    /// Hands out the next queue ticket. Mutex held.
    private func nextTicketLocked() -> UInt64 {
        asyncWaiters.assertHeld("the mutex of TKDispatchSemaphore.asyncWaiters")
        defer { tickets &+= 1 }
        return tickets
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
            withdraw: { [self] in _ = withdrawLocked(keepToken: false) },
            ticket: { [self] in nextTicketLocked() })
        if Task.isCancelled {
            // The unit came as the task was cancelled: pass it on.
            signal()
            throw CancellationError()
        }
    }

    /// A waiter leaves without being granted (waiters' mutex held). Returns true if it took a
    /// token and keeps it (`keepToken`: a thread whose deadline passed as its grant arrived).
    private func withdrawLocked(keepToken: Bool) -> Bool {
        asyncWaiters.assertHeld("the mutex of TKDispatchSemaphore.asyncWaiters")
        var v = value.load(ordering: .sequentiallyConsistent)
        while v < 0 {
            let (exchanged, original) = value.compareExchange(expected: v, desired: v + 1, ordering: .sequentiallyConsistent)
            if exchanged { return false }
            v = original
        }
        // A signal has counted this waiter: its grant is in the pot or on its way here.
        if takeToken() {
            if keepToken { return true }
            // Give it back as a signal would. Units were in the pot, so nobody is queued and no
            // debt is owed (invariant 2): the only waiters it can be for are spinning threads.
            if value.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue < 0 {
                wakeups.pointer.pointee.wrappingAdd(1, ordering: .releasing)
            }
            return false
        }
        debt += 1
        return false
    }

    /// Takes one unit from the pot if any. Acquiring: pairs with the releasing add in `signalSlow`.
    private func takeToken() -> Bool {
        var tokens = wakeups.pointer.pointee.load(ordering: .relaxed)
        while tokens > 0 {
            let (exchanged, original) = wakeups.pointer.pointee.compareExchange(expected: tokens, desired: tokens - 1, ordering: .acquiring)
            if exchanged { return true }
            tokens = original
        }
        return false
    }

    /// Threads parked (queued) in `wait` now (tests).
    var threadWaiterCount: Int { asyncWaiters.withLock { threads.count } }

    /// Tasks suspended in `acquire()` now (tests).
    var asyncWaiterCount: Int { asyncWaiters.count }

    /// The current value (tests): available units, or minus the waiters not yet served.
    var currentValue: Int { value.load(ordering: .sequentiallyConsistent) }
}

// safety: `word` is atomic; the links only under the semaphore's waiters' mutex; `ticket` is
// immutable.
/// A thread queued in `TKDispatchSemaphore.wait`: parks on `word` until a signal grants it a unit.
final class ThreadWaiter: LinkedNode, @unchecked Sendable {
    static let waiting: UInt32 = 0, granted: UInt32 = 1
    let word = FutexWord(ThreadWaiter.waiting)
    let ticket: UInt64
    /// Links of the queue; guarded by the semaphore's waiters' mutex.
    var next: ThreadWaiter?
    unowned(unsafe) var previous: ThreadWaiter?

    init(ticket: UInt64) { self.ticket = ticket }

    /// Acquiring: pairs with the signal's releasing store of `granted`.
    var isGranted: Bool { word.pointer.pointee.load(ordering: .acquiring) == ThreadWaiter.granted }
}

extension TKDispatchSemaphore: WaitTarget {
    var waitDescription: String { "TKDispatchSemaphore \(ObjectIdentifier(self))" }
    /// A semaphore has no owner: the thread that signalled it last, as a hint.
    var waitHolder: WaitHolder {
        let last = lastSignaller.load(ordering: .relaxed)
        return last == 0 ? .none("never signalled while waits were recorded") : .hint(last, "last signalled by")
    }
}
