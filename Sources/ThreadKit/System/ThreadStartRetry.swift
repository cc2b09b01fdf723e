// ThreadStartRetry: what ThreadKit does when the OS refuses a thread it needs (pthread_create's
// EAGAIN: RLIMIT_NPROC or threads-max reached). A party that could not start its thread (the
// dispatch pool for a worker, the dispatch manager for its event thread) registers a retry here;
// retries run with exponential back-off (1 ms doubling to 1 s) until one round registers nothing
// again, so work queued while no thread could start runs once threads are available — without
// waiting for an unrelated later submission.
//
// Who runs the retries: a thread blocked in a public ThreadKit wait (semaphore, group, join,
// sleep, sync, work-item and operation waits, concurrentPerform: `Parking.park` with
// `retryThreadStarts`) parks no longer than the next attempt and runs the due round when it wakes;
// such a thread holds no ThreadKit-internal lock, so a retry may take the pool's or manager's.
// New submissions and registrations retry by themselves (they start threads as usual).
//
// Threads: any. `pending` and `nextAttemptNanos` are atomics read without the lock by every
// opted-in park (relaxed: a stale value only shifts one park's timeout); `parties`, `backoff` and
// `failedAgain` are guarded by `guardWord` (a spin lock held only to copy or edit them, never
// while calling a party); `running` lets one thread run a round at a time.
import CThreadKit
import Glibc
import Synchronization

// safety: `parties`, `backoff` and `failedAgain` are touched only while holding `guardWord`;
// the rest is atomic or immutable.
final class ThreadStartRetry: @unchecked Sendable {
    static let shared = ThreadStartRetry()

    static let firstBackoff: Duration = .milliseconds(1)
    static let maxBackoff: Duration = .seconds(1)

    /// Some party waits for a thread.
    let pending = Atomic<Bool>(false)
    /// When the next round is due, in nanoseconds since `origin`.
    private let nextAttemptNanos = Atomic<Int64>(0)
    private let origin = ContinuousClock.now
    private let guardWord = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    /// The retries waiting, one per party (keyed by the party's identity). Guarded by guardWord.
    private var parties: [ObjectIdentifier: @Sendable () -> Void] = [:]
    /// Guarded by guardWord.
    private var backoff = ThreadStartRetry.firstBackoff
    /// A party registered again during the round now running: back off further. Guarded by guardWord.
    private var failedAgain = false

    /// `party` could not start a thread: `retry` (which tries again, and registers again if that
    /// fails too) runs at the next due round.
    func register(_ party: AnyObject, retry: @escaping @Sendable () -> Void) {
        withGuard {
            parties[ObjectIdentifier(party)] = retry
            if running.load(ordering: .relaxed) { failedAgain = true }
            if !pending.load(ordering: .relaxed) {
                backoff = ThreadStartRetry.firstBackoff
                nextAttemptNanos.store(nanos(ContinuousClock.now + backoff), ordering: .relaxed)
                pending.store(true, ordering: .releasing)
            }
        }
    }

    /// How long an opted-in park may sleep before the next round is due (nil: nothing pending).
    var untilNextAttempt: Duration? {
        guard pending.load(ordering: .acquiring) else { return nil }
        let due = Duration.nanoseconds(nextAttemptNanos.load(ordering: .relaxed))
        return max(due - (ContinuousClock.now - origin), .zero)
    }

    /// Runs the round of retries if one is due (any thread holding no ThreadKit-internal lock).
    func runIfDue() {
        guard pending.load(ordering: .acquiring), untilNextAttempt == .zero,
            !running.exchange(true, ordering: .acquiring)
        else { return }
        let round = withGuard { () -> [@Sendable () -> Void] in
            failedAgain = false
            let round = Array(parties.values)
            parties.removeAll()
            return round
        }
        for retry in round { retry() }
        withGuard {
            if parties.isEmpty {
                pending.store(false, ordering: .releasing)
            } else {
                if failedAgain { backoff = min(backoff * 2, ThreadStartRetry.maxBackoff) }
                nextAttemptNanos.store(nanos(ContinuousClock.now + backoff), ordering: .relaxed)
            }
        }
        running.store(false, ordering: .releasing)
    }

    private func nanos(_ instant: ContinuousClock.Instant) -> Int64 {
        let a = (instant - origin).attoseconds / 1_000_000_000
        return a > Int128(Int64.max) ? .max : Int64(a)
    }

    /// A spin lock for the few field edits above (never held across a call out).
    private func withGuard<T>(_ body: () -> T) -> T {
        var spins = 0
        while guardWord.exchange(true, ordering: .acquiring) {
            spins += 1
            if spins < 100 { tk_cpu_relax() } else { sched_yield() } // the holder may be preempted
        }
        defer { guardWord.store(false, ordering: .releasing) }
        return body()
    }
}
