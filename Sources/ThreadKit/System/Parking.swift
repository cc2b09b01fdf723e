// Parking: the one way a ThreadKit thread blocks. Every wait in the library (locks, conditions,
// condition locks, read-write locks, once, and later semaphores, groups, sync and join) spins
// briefly with SpinWait and then parks here on a futex word. Because all blocking funnels through
// `park`, a thread pool can install a ParkingObserver on its workers and learn, at once, when one
// of them blocks and when it resumes, and the blocking checker (BlockingChecker) sees every wait
// that reaches the kernel.
//
// Threads: any thread may park or unpark. The observer pointer is per thread (C thread-local),
// read and written only by its own thread.
import CThreadKit

/// Told by `Parking.park` when the calling thread is about to block in the kernel and when it
/// has resumed. Installed per thread (by the dispatch pool, for its workers).
protocol ParkingObserver: AnyObject {
    func willPark()
    func didUnpark()
}

enum Parking {
    /// Installs (or with nil removes) the observer of the calling thread. The thread-local slot
    /// holds one retain of a box around it, released when replaced or removed.
    static func setObserverForCurrentThread(_ observer: (any ParkingObserver)?) {
        if let old = tk_park_observer_get() {
            Unmanaged<ObserverBox>.fromOpaque(old).release()
        }
        tk_park_observer_set(observer.map { Unmanaged.passRetained(ObserverBox($0)).toOpaque() })
    }

    /// Parks the calling thread while `word` holds `expected`, until another thread unparks it or
    /// the deadline passes. Returns false only when `deadline` has passed (never early: the clock
    /// is read again after the kernel says ETIMEDOUT). Returns true when woken, when the word no
    /// longer held `expected`, on a signal and spuriously: callers re-check their state and call
    /// again. `retryThreadStarts`: the caller is a public wait holding no ThreadKit-internal lock,
    /// so while a thread start waits for a retry (ThreadStartRetry) it sleeps no longer than the
    /// next attempt and then runs it (returning true, as a spurious wake). `diagnosed`: false for
    /// the short critical sections of ThreadKit's internal locks (`RawMutex.lockInternal`), which
    /// the blocking checker does not report.
    static func park(
        _ word: borrowing FutexWord, expected: UInt32, deadline: ContinuousClock.Instant? = nil,
        retryThreadStarts: Bool = false, diagnosed: Bool = true
    ) -> Bool {
        var timeout: Duration? = nil
        if let deadline {
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { return false }
            timeout = remaining
        }
        var retryDue = false
        if retryThreadStarts, let retryIn = ThreadStartRetry.shared.untilNextAttempt {
            if retryIn == .zero {
                ThreadStartRetry.shared.runIfDue()
                return true
            }
            if timeout.map({ retryIn < $0 }) ?? true {
                timeout = retryIn
                retryDue = true
            }
        }
        // Blocking in the wrong place (docs/Diagnostics.md §5): only here, on the way to the kernel.
        if DiagnosticsSwitch.isOn(.blocking) && diagnosed { BlockingChecker.willPark() }
        let observer = currentObserver
        observer?.willPark()
        defer { observer?.didUnpark() }
        // A relative timeout on CLOCK_MONOTONIC never ends before the same length has passed on
        // ContinuousClock (CLOCK_BOOTTIME runs at least as fast), so a deadline is never early.
        switch SystemCall.futexWait(word.address, expected: expected, timeout: timeout) {
        case .woken, .valueChanged, .interrupted:
            return true
        case .timedOut:
            if retryDue {
                ThreadStartRetry.shared.runIfDue()
                return true
            }
            return deadline.map { ContinuousClock.now < $0 } ?? true
        }
    }

    /// Wakes one thread parked on `word`. Call after publishing the state change that lets it go.
    static func unparkOne(_ word: borrowing FutexWord) {
        SystemCall.futexWake(word.address, count: 1)
    }

    /// Wakes every thread parked on `word`.
    static func unparkAll(_ word: borrowing FutexWord) {
        SystemCall.futexWake(word.address, count: Int32.max)
    }

    private static var currentObserver: (any ParkingObserver)? {
        guard let raw = tk_park_observer_get() else { return nil }
        return Unmanaged<ObserverBox>.fromOpaque(raw).takeUnretainedValue().observer
    }

    /// Boxes the existential so a single pointer can hold it.
    private final class ObserverBox {
        let observer: any ParkingObserver
        init(_ observer: any ParkingObserver) { self.observer = observer }
    }
}

/// Bounded spinning before parking. A thread woken by the kernel on one core by a thread on the
/// other costs tens of microseconds on our machines; most lock hand-offs complete in far less, so
/// a waiter first polls its word for a short, bounded time. The bound keeps an idle wait from
/// burning a core: after `limit` polls the caller parks.
///
/// Where the process may use one CPU (`CPUBudget.isSingleCPU`) polling cannot help: the thread
/// being waited for cannot run meanwhile. There the budget is one `sched_yield()` instead (for
/// any non-zero limit): the runnable threads go first — a lock holder releases, a sender posts
/// more — and the caller looks once more before it parks. On one CPU that turned a port flood's
/// sleep and wake-up per few messages into one per time slice (4.5 → 7.8 M messages/s).
struct SpinWait {
    private var polls = 0
    private let limit: Int
    private let backoff: Bool

    /// `limit` polls. With `backoff`, poll k is preceded by min(2^k, 64) relax hints, so a waiter
    /// reads a contended lock word (and pulls its cache line away from the holder) rarely, while
    /// still covering a few microseconds; without it, one hint per poll, for waits where reacting
    /// within nanoseconds matters (conditions, a loop about to sleep).
    init(limit: Int, backoff: Bool = false) {
        self.limit = limit
        self.backoff = backoff
    }

    /// A lock waiter: 12 polls with exponential backoff, about 450 relax hints in all. Tuned by the
    /// contended-lock benchmark.
    static func forLock() -> SpinWait { SpinWait(limit: 12, backoff: true) }
    /// For condition waits: covers the signalling thread's round trip through a critical section.
    static let conditionLimit = 2_000
    /// For a run loop about to sleep while work is flowing in from other threads.
    static let loopLimit = 2_000

    /// Spins before the next poll. Returns false when the budget is spent: time to park.
    mutating func spin() -> Bool {
        guard polls < limit else { return false }
        if CPUBudget.isSingleCPU {
            polls = limit
            sched_yield()
            return true
        }
        let hints = backoff ? min(1 << polls, 64) : 1
        polls += 1
        for _ in 0..<hints { tk_cpu_relax() }
        return true
    }
}
