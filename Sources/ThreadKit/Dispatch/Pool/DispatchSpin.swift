// DispatchSpin: how long each dispatch wait polls before it parks (see docs/Parking.md, "Spin,
// then park"). Constants, decided once; tuned by the dispatch benchmarks on 2 cores, where a waiter
// that spins holds the very core the thread it waits for needs: only hand-offs that usually
// complete within a few microseconds spin long. With one usable CPU (an affinity mask or cgroup
// quota of one, `CPUBudget`) every non-zero budget is one `sched_yield()` instead (SpinWait): the
// thread waited for runs, then the waiter looks once more (a semaphore ping-pong spun 100 µs per
// round trip there before budgets followed the CPU count).

enum DispatchSpin {
    /// A semaphore wait: the signaller is typically mid-hand-off (ping-pong), so polling covers it.
    static let semaphore = SpinWait.conditionLimit
    /// Waits for work that usually takes longer (group and work-item waits, a sync caller waiting
    /// for its drainer, concurrentPerform's last iterations): a short poll, then the core is freed
    /// for the threads being waited for.
    static let longWait = 64
    /// An idle worker: polls for the next submission briefly, which saves the wake-up (tens of
    /// microseconds here) when work arrives in quick succession. 1,000 (was 256): a task group's
    /// children arrive a few microseconds apart, and at 256 a worker parked between two of them,
    /// costing a futex wait and wake per task (docs/Concurrency.md §3).
    static let idleWorker = 1_000
}
