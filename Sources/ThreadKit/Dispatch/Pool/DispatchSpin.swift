// DispatchSpin: how long each dispatch wait polls before it parks (see docs/Parking.md, "Spin,
// then park"). Constants, decided once; tuned by the dispatch benchmarks on 2 cores, where a waiter
// that spins holds the very core the thread it waits for needs: only hand-offs that usually
// complete within a few microseconds spin long. With one usable CPU (an affinity mask or cgroup
// quota of one, `CPUBudget`) waiters for another thread do not spin: that thread cannot run while
// the waiter polls (a semaphore ping-pong spun 100 µs per round trip there instead of parking in
// 4 µs).

enum DispatchSpin {
    /// One CPU for the whole process: the budgets of waits for another thread are zero.
    static let singleCPU = CPUBudget.isSingleCPU
    /// A semaphore wait: the signaller is typically mid-hand-off (ping-pong), so polling covers it.
    static let semaphore = singleCPU ? 0 : SpinWait.conditionLimit
    /// Waits for work that usually takes longer (group and work-item waits, a sync caller waiting
    /// for its drainer, concurrentPerform's last iterations): a short poll, then the core is freed
    /// for the threads being waited for.
    static let longWait = singleCPU ? 0 : 64
    /// An idle worker: polls for the next submission briefly, which saves the wake-up (tens of
    /// microseconds here) when work arrives in quick succession. 1,000 (was 256): a task group's
    /// children arrive a few microseconds apart, and at 256 a worker parked between two of them,
    /// costing a futex wait and wake per task (docs/Concurrency.md §3).
    /// Kept on one CPU too: there a spinning idle worker is descheduled at the end of its slice
    /// with the event set by then, so a flood is taken in large chunks; parking at once made every
    /// refill a futex wake that preempted the producer (global async 1.6× libdispatch's time per
    /// block under `taskset -c 0`, against 0.9× with the spin).
    static let idleWorker = 1_000
}
