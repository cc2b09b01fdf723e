// PoolWorker: one thread of the dispatch pool and its ParkingObserver. The loop below is the
// worker loop of docs/DispatchPool.md. Fields: `event` is set by wakers (any thread); `isIdle` and
// `nextIdle` are the idle stack's (`IdleWord`, under its lock; `isIdle` is atomic, so holders of
// the pool's lock may read it too); `idleDeadline` is the scheduler's (PoolScheduler),
// `monitorSeen` and `monitorWindow` the monitor's, all guarded by the pool's lock; `local` is a
// `LocalQueue`: the worker pushes and pops it without a lock, thieves and the monitor claim jobs
// from it while holding the pool's lock (its protocol says who may do what); `activity` is the
// worker's progress word (written by the worker, marked by the monitor: see there); `mine`
// (runningJob, countedBlocked, activityCount, ...) belongs to the worker's thread (the observer is
// called only on it).
import CThreadKit
import Synchronization

// safety: `nextIdle` is touched only under its tier's idle stack lock, the scheduler's
// `idleDeadline` and the monitor's fields only under the pool's lock, `mine` only by the worker's
// own thread; the local queue keeps its own protocol (`LocalQueue`); the rest is atomic or
// immutable after init.
final class PoolWorker: ParkingObserver, PoolSchedulerWorker, @unchecked Sendable {
    /// unowned(unsafe): the pool lives as long as the process (a checked `unowned` paid an atomic
    /// strong-retain and a release on every use, several per job).
    // safety: the only pool is `DispatchPool.shared`, never released.
    unowned(unsafe) let pool: DispatchPool
    /// Serves the background level (at the background OS class) instead of the normal ones.
    let background: Bool
    /// Set by the waker that took this worker off the idle stack.
    let event = ParkingEvent()
    /// On its tier's idle stack. Written by the `IdleWord`, under the stack's lock (by a producer's
    /// claim too, without the pool's lock); read there exactly, and under the pool's lock by the
    /// monitor and the thieves, for whom a claim in flight is no matter (a claimed worker has
    /// nothing to steal and runs no job yet). Relaxed: the stack's lock orders the exact reads.
    var isIdle: Bool {
        get { idleFlag.load(ordering: .relaxed) }
        set { idleFlag.store(newValue, ordering: .relaxed) }
    }
    private let idleFlag = Atomic<Bool>(false)
    /// An idle background worker wakes at this `RunQueues.stamp` to check whether waiting
    /// background work has aged (0: no such work). Written by the scheduler, under the pool's lock.
    // safety: read and written only under the pool's lock, so accesses never overlap; the runtime
    // check cost a call per scheduler transition.
    @exclusivity(unchecked) var idleDeadline: UInt64 = 0
    /// The next worker down the idle stack (`IdleWord`). Written only under the stack's lock.
    // safety: only under the idle stack's lock, so accesses never overlap.
    @exclusivity(unchecked) var nextIdle: PoolWorker?
    /// Set once the thread runs (a failed thread start never sets it).
    let started = Atomic<Bool>(false)
    /// The worker's dispatch context (installed as its thread's context).
    let context = DispatchContext()
    /// The worker's local queue (docs/DispatchPool.md, "Local queues and stealing"): jobs taken
    /// from the run queues with the one running (a batch, marked as such) and jobs this worker
    /// submitted itself while running one, not started yet, all of one level, FIFO. The worker
    /// pushes at the back and pops at the front without a lock; a thief claims the older half at
    /// the front; the pool moves them all back to its run queues when the worker blocks, stalls,
    /// or another level waits.
    let local = LocalQueue<DispatchEntry>()
    /// The progress word the pool's monitor watches (docs/DispatchPool.md, "Workers blocked outside
    /// ThreadKit"): `count << 2 | observable << 1 | stalled`. The worker stores a new count at every
    /// job start and end and around every ThreadKit park, with `observable` set while it runs a job
    /// and is not parked in ThreadKit; the monitor, under the pool's lock, sets `stalled` by a
    /// compare-exchange against the word it saw a tick earlier (so only a worker that made no
    /// progress since is marked) and clears it the same way. Whoever's read-modify-write comes
    /// second sees the other's: a worker whose exchange returns `stalled` set was counted stalled
    /// and tells the pool. Acquire-release RMWs; the counts themselves are under the pool's lock.
    let activity = Atomic<UInt64>(0)
    /// The word the monitor saw at its previous tick. Guarded by the pool's lock.
    // safety: only under the pool's lock (the monitor's tick), so accesses never overlap.
    @exclusivity(unchecked) var monitorSeen: UInt64 = 0
    /// The window the monitor judges this worker over while it stays inside one job
    /// (`DispatchPool.RunnableWindow`); nil when none is open. Guarded by the pool's lock.
    // safety: only under the pool's lock, like `monitorSeen`.
    @exclusivity(unchecked) var monitorWindow: DispatchPool.RunnableWindow?
    /// The worker's kernel thread id (0 until it runs), for the monitor's look at its state.
    let threadID = Atomic<UInt32>(0)
    /// What only the worker's thread reads and writes.
    struct ThreadState {
        /// Inside a job (parks then mean a blocked worker).
        var runningJob = false
        /// The pool counts this worker as blocked right now.
        var countedBlocked = false
        /// Local jobs started in a row while jobs of the same level waited in the run queues; at
        /// `localStreakLimit` the local queue goes to the back of the run queue.
        var localStreak = 0
        /// Jobs run in a row from the local queue's LIFO slot (`LocalQueue.popNext`).
        var lifoStreak = 0
        /// The level whose OS priority the thread has (-1: not set by the pool; a new thread
        /// inherits whatever its creator had).
        var appliedLevel = -1
        /// The count part of `activity`.
        var activityCount: UInt64 = 0
        /// The running job's submissions overflowed its local queue (`mayPushLocal`).
        var overflowed = false
    }
    /// Kept in memory of its own and reached through addressors: a stored `var` of a class pays a
    /// runtime exclusivity check on every access (two per job: 230 instructions, callgrind).
    // safety: allocated in init, freed in deinit; touched only by the worker's own thread (in
    // `run` and what it calls), so accesses never overlap.
    private let threadStateStorage: UnsafeMutablePointer<ThreadState>
    private var mine: ThreadState {
        // safety: `threadStateStorage` lives as long as `self`; only the worker's thread calls.
        unsafeAddress { UnsafePointer(threadStateStorage) }
        unsafeMutableAddress { threadStateStorage }
    }

    /// `TKDispatchQueue.rootReferences`, read once (a global's lazy initialisation check per job).
    private let roots = TKDispatchQueue.rootReferences

    init(pool: DispatchPool, background: Bool) {
        self.pool = pool
        self.background = background
        // safety: freed in deinit.
        threadStateStorage = .allocate(capacity: 1)
        threadStateStorage.initialize(to: ThreadState())
    }

    deinit {
        threadStateStorage.deinitialize(count: 1)
        threadStateStorage.deallocate()
    }

    /// The worker loop: pop a job and run it; with none, sleep idle; retire after idling long.
    func run() {
        threadID.store(SystemCall.currentThreadID, ordering: .relaxed)
        started.store(true, ordering: .releasing)
        DispatchContext.install(context)
        Parking.setObserverForCurrentThread(self)
        // safety: unretained is enough: the thread-local is cleared (defer below) before `run`
        // returns, and the thread running `run` holds the worker until then.
        tk_pool_worker_set(Unmanaged.passUnretained(self).toOpaque())
        defer {
            tk_pool_worker_set(nil)
            Parking.setObserverForCurrentThread(nil)
        }
        // The worker was counted running and searching when it was planned.
        var searching = true
        while true {
            if let (entry, level, batched) = popLocal() {
                let waiting: UInt8
                var normalStaged = false
                if background {
                    // A background job also waits for normal work still staged (its flag raised
                    // and left to busy normal workers), which the mirror does not show yet: the
                    // visit below drains it, and the admission rule then holds the local queue
                    // back. The flag first, then the mirror, both sequentially consistent: the
                    // pairing with `DispatchPool.normalBeingDrained` (Models/Admission.pml).
                    normalStaged =
                        pool.stage.pending.load(ordering: .sequentiallyConsistent) & DispatchPool.Tier.normal.bit != 0
                    waiting = pool.nonEmptyMirror.load(ordering: .sequentiallyConsistent)
                } else {
                    // The run queues' levels, and the levels staged by producers and not drained
                    // yet (a higher level staged while this worker runs a long batch must not
                    // wait for the batch: InjectionStage.stagedLevels).
                    waiting =
                        pool.nonEmptyMirror.load(ordering: .relaxed) & ~DispatchPool.normalBeingDrained
                        | pool.stage.stagedLevels.load(ordering: .relaxed) & RunQueues.normalMask
                }
                let otherLevels = waiting & ~(UInt8(1) << level)
                if otherLevels != 0 || normalStaged
                    || (!batched && waiting != 0 && mine.localStreak >= DispatchPool.localStreakLimit)
                {
                    // Another level waits (its order and aging belong to the run queues): the local
                    // queue goes back to the front of its level and the worker picks there. Or
                    // jobs of this level have waited there behind `localStreakLimit` local ones:
                    // the local queue goes behind them.
                    pool.giveBack(self, toFront: otherLevels != 0 || normalStaged, first: (entry, level))
                    mine.localStreak = 0
                    continue
                }
                if !batched { mine.localStreak = waiting != 0 ? mine.localStreak + 1 : 0 }
                runJob(entry, level: level)
                continue
            }
            if let (entry, level) = pool.nextJob(for: self, wasSearching: &searching) {
                mine.localStreak = 0
                mine.lifoStreak = 0
                runJob(entry, level: level)
                continue
            }
            switch sleepIdle() {
            case .woken: searching = true // the waker counted it searching
            case .admittedItself: searching = false // aged background work; not counted searching
            case .retired: return
            }
        }
    }

    /// Whether a job submitted now may go to the local queue at all (inside a job). Worker thread.
    /// And not once the job's submissions have overflowed to the shared path: from then on all of
    /// them go there, so one job's submissions start in the order it made them. (A job that kept
    /// refilling its local queue after overflowing had each refill handed to the front of the run
    /// queue by the monitor — it gives a long job's local queue back every tick — ahead of its
    /// own older, overflowed submissions: a million-task group then completed so far out of order
    /// that the Swift runtime's child-list removal, linear in the distance from the oldest
    /// unfinished child, took minutes. docs/DispatchPool.md, "Local queues and stealing".)
    var mayPushLocal: Bool { mine.runningJob && !mine.overflowed }

    /// The job running on this worker submitted a job its local queue refused: the rest of its
    /// submissions go to the shared path. Worker thread, inside a job.
    func noteOverflow() { mine.overflowed = true }

    enum LocalPush { case pushed(before: Int), refused(DispatchEntry) }

    /// Puts `entry`, submitted by the job this worker runs, on its local queue and says how many
    /// jobs were there before; or hands it back if it must go to the run queues (the queue holds
    /// another level, or it is full). The entry is moved, never copied. Worker thread, inside a job.
    func pushLocal(_ entry: consuming DispatchEntry, level: Int) -> LocalPush {
        guard let before = local.acceptsPush(level: level, unbatchedLimit: DispatchPool.localLimit) else {
            return .refused(entry)
        }
        local.pushNewest(entry, level: level)
        return .pushed(before: before)
    }

    /// The next entry of the local queue (its LIFO slot first, within tokio's limit), its level,
    /// and whether it came in a batch from the run queues. Worker thread.
    @inline(__always)
    private func popLocal() -> (DispatchEntry, Int, batched: Bool)? { local.popNext(lifoStreak: &mine.lifoStreak) }

    /// Stores the next progress word (`observable`: inside a job and not parked in ThreadKit) and
    /// returns whether the monitor had marked the worker stalled. Worker thread.
    @inline(__always)
    private func advanceActivity(observable: Bool) -> Bool {
        mine.activityCount &+= 1
        let old = activity.exchange(mine.activityCount << 2 | (observable ? 2 : 0), ordering: .acquiringAndReleasing)
        return old & 1 != 0
    }

    /// The same, from a word that was not observable: the monitor never marks such a word (its
    /// compare-exchange expects `observable`), so a plain store does, without a locked instruction.
    @inline(__always)
    private func becomeObservable() {
        mine.activityCount &+= 1
        activity.store(mine.activityCount << 2 | 2, ordering: .releasing)
    }

    private func runJob(_ entry: DispatchEntry, level: Int) {
        if level != mine.appliedLevel && !background && WorkerPriority.canRaise {
            WorkerPriority.apply(level: level, to: SystemCall.currentThreadID)
            mine.appliedLevel = level
        }
        mine.runningJob = true
        mine.overflowed = false
        becomeObservable()
        if entry.isUserWork {
            // A block of a global queue runs "inside" that global queue.
            // safety: the root queues are held for the life of the process (`TKDispatchQueue.roots`).
            roots[level]._withUnsafeGuaranteedRef { root in
                context.push(root, exclusive: false)
                entry.runObserved(on: root, exclusive: false)
                context.pop()
            }
        } else {
            entry.run()
        }
        mine.runningJob = false
        // Counted stalled by the monitor while it ran: running again now.
        if advanceActivity(observable: false) { pool.workerDidUnstall(self) }
    }

    private enum IdleOutcome { case woken, admittedItself, retired }

    /// Sleeps on the idle stack until woken, admitted by aging, or retired.
    private func sleepIdle() -> IdleOutcome {
        let idleSince = RunQueues.stamp()
        // Written by the scheduler under the pool's lock when this worker parked; read here by the
        // same thread after that section, so no other synchronisation is needed.
        let aging = idleDeadline
        let retireAt = idleSince &+ DispatchPool.idleTimeoutNanoseconds
        var deadline = aging != 0 ? min(aging, retireAt) : retireAt
        while true {
            // Poll for the next submission briefly (it saves the wake-up when work arrives in quick
            // succession), but only while few others poll: sixteen idle workers polling took a
            // quarter of a 16-CPU machine's time in the profiles (`maxIdleSpinners`).
            // (Polled here rather than by `event.wait`'s own spin, so the count drops when the
            // polling ends, not when the park does.)
            var set = false
            if pool.idleSpinners.wrappingAdd(1, ordering: .relaxed).oldValue < pool.maxIdleSpinners {
                var spin = SpinWait(limit: DispatchSpin.idleWorker)
                while !set && spin.spin() { set = event.isSet }
            }
            pool.idleSpinners.wrappingSubtract(1, ordering: .relaxed)
            if set { return .woken }
            if event.wait(deadline: PoolWorker.instant(deadline), spinLimit: 0, observed: false) { return .woken }
            switch pool.idleTimedOut(self, idleSince: idleSince) {
            case .woken:
                // The waker sets the event right after releasing the idle stack's lock: consume
                // that set now, so it cannot land after the next reset.
                _ = event.wait(spinLimit: DispatchSpin.idleWorker, observed: false)
                return .woken
            case .work:
                return .admittedItself
            case .sleep(let next):
                deadline = next
            case .retire:
                return .retired
            }
        }
    }

    /// A `RunQueues.stamp` as a ContinuousClock instant, never earlier than the stamp (the stamp
    /// clock is read first).
    private static func instant(_ stamp: UInt64) -> ContinuousClock.Instant {
        let stampNow = RunQueues.stamp()
        let now = ContinuousClock.now
        return stamp >= stampNow ? now + .nanoseconds(Int64(stamp - stampNow)) : now
    }

    // MARK: ParkingObserver (worker thread only)

    func willPark() {
        guard mine.runningJob, !mine.countedBlocked else { return }
        mine.countedBlocked = true
        // Counted stalled already: the pool moves it from stalled to blocked instead of running.
        let wasStalled = advanceActivity(observable: false)
        pool.workerWillBlock(self, wasStalled: wasStalled)
    }

    func didUnpark() {
        guard mine.countedBlocked else { return }
        mine.countedBlocked = false
        // Counted running first, observable second: the monitor marks only observable words, and
        // marking counts the worker out of `running`. Observable while still counted blocked (the
        // old order: it waits for the pool's lock in workerDidUnblock, asleep, for a tick under
        // load) let the monitor take it out of `running` too, leaving the tier one short until
        // the job ended — 0 running with 1 searching in one CI run, caught by PoolScheduler's
        // invariant assertion.
        pool.workerDidUnblock(self)
        becomeObservable()
    }
}
