// RunnableWindow: the pool monitor's rule for "blocked outside ThreadKit" (docs/DispatchPool.md,
// "What the monitor counts as blocked"). A busy worker inside one job is judged over a window of
// wall time by how much of it its thread spent runnable: on a CPU or waiting for one (the first
// two fields of /proc/self/task/TID/schedstat). A thread runnable for less than half the window,
// and asleep in a system call that is not a memory call when the window closes, counts stalled;
// a stalled one runnable for half a window or more counts running again. One look at the end of
// each window, so a job that sleeps in 1 ms steps (usleep loops, poll with a timeout, retry
// loops: libdispatch's dispatch_readsync.c) counts as blocked although it wakes every
// millisecond, and a CPU-bound job that waits a moment for the address space's lock (a page
// fault under ThreadSanitizer) or sits on an oversubscribed run queue does not. Go's sysmon
// judges a P by time spent in one system call; the share of a window is the same idea for jobs
// that enter many short ones.
//
// A stalled worker is looked at less and less often while it stays stalled (its window doubles,
// up to `maximumLength`): a crowd of blocked workers costs the monitor a few /proc reads per
// worker per quarter second, not per millisecond.
//
// Pure values: `judge` is driven by the tests with any looks and clock (DispatchPoolMonitorTests).
// The pool keeps one window per worker (`PoolWorker.monitorWindow`, guarded by the pool's lock).

extension DispatchPool {
    /// One look at a worker's kernel thread.
    struct ThreadLook: Equatable {
        /// Asleep in a system call that is not a memory call (`DispatchPool.threadIsBlocked`).
        var blocked: Bool
        /// Nanoseconds on a CPU plus nanoseconds waiting on a run queue so far (schedstat's first
        /// two fields); nil where the kernel keeps no schedstat.
        var runnable: UInt64?
    }

    /// The window a busy worker is being judged over, opened by a look.
    struct RunnableWindow: Equatable {
        /// How long a running worker's window lasts. Measured (docs/DispatchPool.md): 4 ms lets
        /// readsync's sleepers grow the pool within tens of milliseconds at 2 CPUs and keeps the
        /// ThreadSanitizer runs at 16 workers on 2 cores free of false stalls.
        static let length: UInt64 = 4_000_000
        /// The longest a stalled worker waits for its next look.
        static let maximumLength: UInt64 = 64 * length

        /// The worker's progress word when the window opened (a new job, a park, a verdict: a new
        /// window).
        var word: UInt64
        var openedAt: UInt64
        var length: UInt64
        /// The look that opened it.
        var opening: ThreadLook

        /// When the window closes: the monitor looks at the worker again then, not before.
        var closesAt: UInt64 { openedAt &+ length }

        enum Verdict: Equatable {
            /// Nothing to change (the window may still be open).
            case keep
            /// Count the running worker stalled.
            case stall
            /// Count the stalled worker running again.
            case unstall
        }

        /// Judges the worker whose progress word is `word` (bit 0: counted stalled) by `look`, taken
        /// at `now`, against `window`, the one it was being judged over (nil: none yet). Returns
        /// the verdict and the window to keep (for the word the verdict leaves).
        static func judge(_ window: RunnableWindow?, word: UInt64, now: UInt64, look: ThreadLook) -> (Verdict, RunnableWindow) {
            let stalled = word & 1 != 0
            guard let window, window.word == word, now >= window.openedAt else {
                return (.keep, RunnableWindow(word: word, openedAt: now, length: length, opening: look))
            }
            guard now >= window.closesAt else { return (.keep, window) }
            let elapsed = now - window.openedAt
            let mostlyBlocked: Bool
            if let before = window.opening.runnable, let after = look.runnable, after >= before {
                mostlyBlocked = (after - before) * 2 < elapsed
            } else {
                // No schedstat: blocked at both ends of the window, with the same job between.
                mostlyBlocked = window.opening.blocked && look.blocked
            }
            if !stalled {
                guard mostlyBlocked && look.blocked else {
                    return (.keep, RunnableWindow(word: word, openedAt: now, length: length, opening: look))
                }
                return (.stall, RunnableWindow(word: word | 1, openedAt: now, length: length, opening: look))
            }
            guard mostlyBlocked else {
                return (.unstall, RunnableWindow(word: word & ~1, openedAt: now, length: length, opening: look))
            }
            // Still stalled: look again after twice as long.
            return (.keep, RunnableWindow(word: word, openedAt: now, length: min(window.length * 2, maximumLength), opening: look))
        }
    }
}
