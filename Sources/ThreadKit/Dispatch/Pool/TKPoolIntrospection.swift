// TKPoolIntrospection: what the benchmarks and the stress command read of the dispatch pool
// (`tkbench stress`, the scaling child's counters). SPI, not public API: import it with
// `@_spi(Benchmarks) import ThreadKit`. Any thread; every figure is a snapshot.

@_spi(Benchmarks)
public enum TKPoolIntrospection {
    /// Acquisitions of the pool's one process-wide lock since the process started (every taker:
    /// producers, workers, the monitor). Counted under the lock itself, so reading it costs one
    /// lock visit; the counter adds no atomic operation to any path.
    public static var poolLockAcquisitions: Int {
        DispatchPool.shared.lockAcquisitionCount
    }

    /// Of those, the ones a submission made: a producer takes the pool's lock only when its job's
    /// tier has nobody searching and a thread must start (or a background worker must be woken,
    /// or the monitor sleeps), never to enqueue; it wakes an idle normal worker without it. A flood
    /// into busy workers adds none.
    public static var poolLockAcquisitionsBySubmitters: Int {
        DispatchPool.shared.submitterLockAcquisitionCount
    }

    /// The scheduler's state as text: per tier the counters (threads, running, blocked, stalled,
    /// idle, searching), the jobs waiting per level and in the stage, and each worker's state.
    public static func stateDescription() -> String {
        DispatchPool.shared.stateDescription()
    }

    /// The pool's width: how many jobs of one tier run at once (the CPU budget when it started).
    public static var width: Int { DispatchPool.shared.width }

    /// The most threads one tier may have, blocked ones included.
    public static var threadCap: Int { DispatchPool.shared.threadCap }

    /// FUTEX_WAIT calls ThreadKit has made since the process started, on any word (the pool's lock,
    /// its workers' parking, every TKLock, condition and semaphore): the process-wide count that
    /// SystemCall's futex wrapper keeps with one relaxed atomic add per call. Futex calls made by
    /// anything else in the process (glibc's pthread mutexes, libdispatch, Foundation) are not in it.
    public static var futexWaitCalls: Int { SystemCall.futexWaitCalls.load(ordering: .relaxed) }

    /// FUTEX_WAKE calls ThreadKit has made since the process started (as `futexWaitCalls`).
    public static var futexWakeCalls: Int { SystemCall.futexWakeCalls.load(ordering: .relaxed) }
}
