// DispatchPool: the one thread pool under every queue but the main one (docs/DispatchPool.md,
// "What wakes a worker"). Any thread may submit; workers pop. Everything below is guarded by
// `lock`, a DispatchLock (a leaf: nothing is locked or woken while it is held; wakes and thread
// starts happen after unlocking, from the lists the locked section filled in), always taken and
// released through `lockPool`/`tryLockPool`/`unlockPool`, which also move the jobs that producers
// staged while the lock was congested into the run queues (`InjectionStage`, docs: "Staging").
import CThreadKit
import Glibc
import Synchronization

final class DispatchPool: @unchecked Sendable {
    static let shared = DispatchPool()

    /// Workers of one tier may run this many jobs at once (not counting blocked ones): the CPUs this
    /// process may use when the pool starts (affinity mask and cgroup quota, `CPUBudget`).
    let width: Int
    /// No tier ever has more threads than this, blocked ones included.
    static let hardCap = 64
    /// An idle worker's thread ends after this long without work.
    static let idleTimeout: Duration = .seconds(2)
    /// A worker takes at most this many jobs of one level per visit to the lock, and only when the
    /// level holds several per worker and no other level waits: fewer lock round trips when a
    /// queue is long.
    static let batchLimit = 8
    /// A worker's local queue holds at most this many jobs (docs/DispatchPool.md, "Local queues and
    /// stealing"); more go to the run queues.
    static let localLimit = 32
    /// Local jobs a worker starts in a row while jobs of the same level wait in the run queues,
    /// before its local queue goes behind them (a batch, at most `batchLimit - 1`, never reaches it).
    static let localStreakLimit = 8

    /// Per tier (0 normal, 1 background). Guarded by `lock`.
    struct Tier {
        /// Workers executing or about to execute a job (woken, started, or between jobs), not
        /// blocked and not idle.
        var running = 0
        /// Workers parked inside a ThreadKit wait while running a job.
        var blocked = 0
        /// Workers the monitor found blocked outside ThreadKit (no progress for a tick, thread not
        /// runnable) while running a job: not counted running, like blocked ones.
        var stalled = 0
        /// Live worker threads (running + blocked + stalled + idle).
        var threads = 0
        /// Every live worker of the tier (the monitor looks at the busy ones).
        var workers: [PoolWorker] = []
        /// Workers woken or started that have not popped a job yet. While one searches, submits
        /// wake nobody else: the searcher wakes the next when it finds a job and more wait.
        var searching = 0
        /// Idle workers, most recently idle last (woken first: its cache is warm).
        var idle: [PoolWorker] = []
    }

    /// Taken only through `lockPool`, `tryLockPool` and `unlockPool` (which drain `stage`).
    let lock = DispatchLock()
    /// Submissions that found `lock` congested (docs/DispatchPool.md, "Staging").
    let stage: InjectionStage
    /// The run queues, guarded by lock. Kept in memory of their own (the pool lives as long as the
    /// process) and reached through addressors: a stored property of a class pays a runtime
    /// exclusivity check on every access, which showed on the submit path.
    private let runQueuesStorage: UnsafeMutablePointer<RunQueues>
    var runQueues: RunQueues {
        unsafeAddress { UnsafePointer(runQueuesStorage) }
        unsafeMutableAddress { runQueuesStorage }
    }
    /// `runQueues.nonEmpty` as of the last release of `lock`: a worker between the jobs of its batch
    /// reads it without the lock to see whether more important work has arrived. Relaxed: a stale
    /// value only delays that check by one job.
    let nonEmptyMirror = Atomic<UInt8>(0)
    /// `tiers[t].searching` as of its last change (under `lock`), per tier: a worker that pushed a
    /// second local job asks for a thief only while nobody searches. Relaxed: a stale value costs
    /// one needless lock visit or one missed wake that the monitor's next tick repairs.
    let searchingNormal = Atomic<Int>(0)
    let searchingBackground = Atomic<Int>(0)
    /// `tiers[t].idle.count` as of its last change (under `lock`), per tier, for the same purpose.
    let idleNormal = Atomic<Int>(0)
    let idleBackground = Atomic<Int>(0)
    @inline(__always) func idleMirror(_ t: Int) -> Int {
        t == 0 ? idleNormal.load(ordering: .relaxed) : idleBackground.load(ordering: .relaxed)
    }
    @inline(__always) func searchingMirror(_ t: Int) -> Int {
        t == 0 ? searchingNormal.load(ordering: .relaxed) : searchingBackground.load(ordering: .relaxed)
    }
    /// `monitor.awake` as of its last change (under `lock`): a local push wakes the monitor only
    /// while it sleeps. Relaxed, for the same reason.
    let monitorAwakeMirror = Atomic<Bool>(false)
    /// Normal (0) and background (1), guarded by lock; in memory of their own like the run queues.
    let tiers: UnsafeMutablePointer<Tier>
    /// The monitor's state, guarded by lock; in memory of its own like the tiers.
    let monitor: UnsafeMutablePointer<MonitorState>
    /// Set to wake the monitor thread (docs/DispatchPool.md, "Workers blocked outside ThreadKit").
    let monitorEvent = ParkingEvent()
    private var nextWorkerNumber = 0             // guarded by lock
    /// 0: no worker start has failed; 1: one did and was reported; 2: a start succeeded after that
    /// and was reported too. Each report is made once per process.
    private let reportedStartFailure = Atomic<Int>(0)

    private init() {
        width = CPUBudget.usableCPUs()
        stage = InjectionStage(width: width)
        runQueuesStorage = .allocate(capacity: 1)
        runQueuesStorage.initialize(to: RunQueues())
        tiers = .allocate(capacity: 2)
        tiers.initialize(repeating: Tier(), count: 2)
        monitor = .allocate(capacity: 1)
        monitor.initialize(to: MonitorState())
    }

    /// What a locked section decided to do once the lock is released.
    struct Actions {
        var wake: PoolWorker?
        var spawn = 0
        var spawnBackground = false
        var monitor = MonitorAction.none

        mutating func perform(_ pool: DispatchPool) {
            wake?.event.set()
            if spawn > 0 { pool.startWorkers(spawn, background: spawnBackground) }
            pool.perform(monitor)
        }
    }

    // MARK: The lock and the stage

    /// Takes the pool's lock and moves any staged jobs into the run queues (before anything else
    /// looks at them: a producer's staged jobs go in before its next one).
    @inline(__always)
    func lockPool() {
        lock.lock()
        if stage.pending.load(ordering: .relaxed) { drainStageLocked() }
    }

    /// `lockPool` if the lock is free now.
    @inline(__always)
    func tryLockPool() -> Bool {
        guard lock.tryLock() else { return false }
        if stage.pending.load(ordering: .relaxed) { drainStageLocked() }
        return true
    }

    /// Offers the work drained while the lock was held, releases it, and — if a producer staged a
    /// job meanwhile and the lock is free — takes it again to drain (the holder's half of the
    /// staging handshake; docs/DispatchPool.md, "Staging").
    @inline(__always)
    func unlockPool() {
        releaseOfferingDrained()
        if stage.pending.load(ordering: .sequentiallyConsistent) { drainStageAfterUnlock() }
    }

    /// Releases the lock, having planned a worker for each tier that drained jobs arrived in (one
    /// `Actions` per tier, as each holds one wake), and carries those plans out.
    @inline(__always)
    private func releaseOfferingDrained() {
        guard stage.drainedTiers != 0 else { return lock.unlockSequentiallyConsistent() }
        let tiers = stage.drainedTiers
        stage.drainedTiers = 0
        var normal = Actions(), background = Actions()
        if tiers & 1 != 0 { offerWorkLocked(background: false, &normal) }
        if tiers & 2 != 0 { offerWorkLocked(background: true, &background) }
        lock.unlockSequentiallyConsistent()
        normal.perform(self)
        background.perform(self)
    }

    @inline(__always)
    func withPoolLock<T>(_ body: () throws -> T) rethrows -> T {
        lockPool()
        defer { unlockPool() }
        return try body()
    }

    private func drainStageLocked() {
        stage.drain(into: &runQueues)
        publishNonEmptyLocked()
    }

    /// Drains for producers that staged while this thread held the lock, while the flag stays
    /// raised and the lock is free (a busy lock's holder does it when it unlocks).
    private func drainStageAfterUnlock() {
        while stage.pending.load(ordering: .sequentiallyConsistent), tryLockPool() { releaseOfferingDrained() }
    }

    // MARK: Submitting

    /// Appends `entry` to the run queue of `level` and wakes or starts a worker if the tier may
    /// take more work and nobody is already looking for it.
    func submit(_ entry: consuming DispatchEntry, level: Int) {
        // Submitted by a job running on a worker of the right tier: its local queue, no lock.
        if let raw = tk_pool_worker_get() {
            let worker = Unmanaged<PoolWorker>.fromOpaque(raw).takeUnretainedValue()
            if worker.background == (level == RunQueues.background) && worker.mayPushLocal {
                switch worker.pushLocal(entry, level: level) {
                case .pushed(let before): return localPushed(worker, before: before)
                case .refused(let back): entry = back
                }
            }
        }
        submitShared(entry, level: level)
    }

    /// Appends `entry` to the run queue of `level` (never a local queue) and offers it; with the
    /// lock congested (threads asleep on it), stages it for the lock's next holder instead of
    /// waiting (docs/DispatchPool.md, "Staging").
    private func submitShared(_ entry: consuming DispatchEntry, level: Int) {
        if !tryLockPool() {
            guard !lock.isCongested else {
                // Raised the flag: take the lock if it came free meanwhile (else its holder drains).
                if stage.stage(entry, level: level) && tryLockPool() { unlockPool() }
                return
            }
            // Only taken: its holder is gone within the lock's spin, cheaper than staging (the
            // job written twice, a drain); measured on 2 CPUs (docs/DispatchPool.md, "Staging").
            lockPool()
        }
        runQueues.push(entry, level: level)
        publishNonEmptyLocked()
        var actions = Actions()
        offerWorkLocked(background: level == RunQueues.background, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// Appends `count` copies of `entry` (tokens of a concurrent queue, helpers of concurrentPerform)
    /// to the run queues, never to a local queue: they are there to run side by side.
    func submit(_ entry: DispatchEntry, level: Int, count: Int) {
        guard count > 0 else { return }
        if count == 1 { return submitShared(entry, level: level) }
        lockPool()
        for _ in 0..<count { runQueues.push(entry, level: level) }
        publishNonEmptyLocked()
        var actions = Actions()
        offerWorkLocked(background: level == RunQueues.background, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// After `worker` put a job on its local queue (`before` were there already): the monitor must
    /// be watching (the job that pushed may run long, or block outside ThreadKit, with its
    /// continuation behind it), and an idle worker may come and steal — `async` means "may run
    /// now, beside me", and the job that pushed often goes on running (a token loop, a drain, a
    /// fan-out). Asked at 0, 1, 2, 4, 8 and 16 jobs before, and only while an idle worker exists
    /// and nobody searches (atomic mirrors, read without the lock), so a burst of local pushes
    /// visits the pool's lock a few times, not once per job, and a push with a searcher already
    /// on its way (the common case in a chain of hops) visits it not at all. Worker thread.
    private func localPushed(_ worker: PoolWorker, before: Int) {
        let t = worker.background ? 1 : 0
        let wantMonitor = !monitorAwakeMirror.load(ordering: .relaxed)
        let wantThief = before & (before &- 1) == 0 && searchingMirror(t) == 0 && idleMirror(t) > 0
        guard wantMonitor || wantThief else { return }
        lockPool()
        var actions = Actions()
        if wantMonitor { watchLocked(t, batches: true, &actions) }
        if wantThief { offerWorkLocked(background: worker.background, forStealing: true, &actions) }
        unlockPool()
        actions.perform(self)
    }

    /// Copies `runQueues.nonEmpty` to its mirror, only when it changed: every worker reads the
    /// mirror between local jobs, so a store per submission would move its cache line to the
    /// submitter and back once per job in a flood. Caller holds lock.
    @inline(__always)
    private func publishNonEmptyLocked() {
        let bits = runQueues.nonEmpty
        if nonEmptyMirror.load(ordering: .relaxed) != bits { nonEmptyMirror.store(bits, ordering: .relaxed) }
    }

    /// Copies `tiers[t].idle.count` to its mirror. Caller holds lock.
    @inline(__always)
    private func publishIdleLocked(_ t: Int) {
        if t == 0 {
            idleNormal.store(tiers[t].idle.count, ordering: .relaxed)
        } else {
            idleBackground.store(tiers[t].idle.count, ordering: .relaxed)
        }
    }

    /// Changes `tiers[t].searching` and its mirror. Caller holds lock.
    @inline(__always)
    private func addSearching(_ t: Int, _ delta: Int) {
        tiers[t].searching += delta
        if t == 0 {
            searchingNormal.store(tiers[t].searching, ordering: .relaxed)
        } else {
            searchingBackground.store(tiers[t].searching, ordering: .relaxed)
        }
    }

    /// Wakes an idle worker, or plans a new one, if the tier may admit work, work waits (in the run
    /// queues; `forStealing`: in a worker's local queue), and no worker is searching already.
    /// Caller holds lock.
    func offerWorkLocked(background: Bool, forStealing: Bool = false, _ actions: inout Actions) {
        let t = background ? 1 : 0
        if !forStealing { watchLocked(t, batches: false, &actions) }
        guard tiers[t].searching == 0, tiers[t].running < width,
              forStealing || runQueues.hasWork(background: background) else { return }
        if background && !forStealing && !runQueues.backgroundAdmissible() {
            return offerAgingBackgroundLocked(&actions)
        }
        if let worker = tiers[t].idle.popLast() {
            publishIdleLocked(t)
            worker.isIdle = false
            tiers[t].running += 1
            addSearching(t, 1)
            actions.wake = worker
        } else if tiers[t].threads < DispatchPool.hardCap {
            tiers[t].threads += 1
            tiers[t].running += 1
            addSearching(t, 1)
            actions.spawn = 1
            actions.spawnBackground = background
        }
    }

    /// Background work waits behind normal work: makes sure a background worker will notice when
    /// it ages (an idle one parks until the aging deadline). Out of line: the deadline is a
    /// `ContinuousClock.Instant`, a resilient type whose locals cost every caller a metadata lookup
    /// and a dynamic stack allocation, and `offerWorkLocked` runs on every submission. Caller
    /// holds lock.
    @inline(never)
    private func offerAgingBackgroundLocked(_ actions: inout Actions) {
        let aging = runQueues.backgroundAgingDeadline()
        if tiers[1].threads == 0 {
            tiers[1].threads += 1
            tiers[1].running += 1
            addSearching(1, 1)
            actions.spawn = 1
            actions.spawnBackground = true
        } else if let worker = tiers[1].idle.last, let aging, worker.idleDeadline.map({ $0 > aging }) ?? true {
            // It sleeps past the aging deadline: wake it so it re-parks with the new one.
            tiers[1].idle.removeLast()
            publishIdleLocked(1)
            tiers[1].running += 1
            addSearching(1, 1)
            worker.isIdle = false
            actions.wake = worker
        }
    }

    // MARK: Workers

    /// The next job for `worker` (and, when its level is long, up to `batchLimit - 1` more moved to
    /// the worker's batch ring), or nil when it must go idle (it is then on the idle stack and
    /// `idleDeadline` says until when it sleeps). Worker's thread.
    func nextJob(for worker: PoolWorker, wasSearching: inout Bool) -> (DispatchEntry, Int)? {
        let background = worker.background
        let t = background ? 1 : 0
        lockPool()
        var actions = Actions()
        if tiers[t].running <= width {
            var job: (DispatchEntry, Int)?
            if background {
                job = runQueues.popBackground().map { ($0, RunQueues.background) }
            } else {
                job = runQueues.popNormal()
            }
            // Nothing in the run queues of the tier: take half of a busy worker's local queue (a
            // background thief only while no normal work waits: the background admission rule).
            if job == nil && !runQueues.hasWork(background: background)
                && (!background || !runQueues.hasWork(background: false)) {
                job = stealLocked(for: worker, t, &actions)
            }
            if let job {
                // Batch only while the level is alone: under competition every job is one pick,
                // so aging counts the jobs that really started (docs/DispatchPool.md).
                let alone = runQueues.nonEmpty == UInt8(1) << job.1
                let extra = alone ? min(DispatchPool.batchLimit - 1, runQueues.count(job.1) / (2 * width)) : 0
                if extra > 0 {
                    worker.localLock.lock()
                    worker.localLevel = job.1
                    runQueues.popMore(job.1, into: worker.local, max: extra)
                    worker.localLock.unlock()
                    // Jobs now wait in a batch: the monitor watches for the worker stalling.
                    watchLocked(t, batches: true, &actions)
                }
                publishNonEmptyLocked()
                if wasSearching {
                    wasSearching = false
                    addSearching(t, -1)
                    // Chain: more work waits, so the next searcher is woken now.
                    offerWorkLocked(background: background, &actions)
                }
                if !background && runQueues.hasWork(background: true)
                    && (!runQueues.hasWork(background: false) || runQueues.backgroundPassesComplete) {
                    // The last normal job is taken, or enough normal jobs started for waiting
                    // background work to age: it may start now (or once its time condition holds;
                    // an idle background worker then re-parks until that instant).
                    offerWorkLocked(background: true, &actions)
                }
                unlockPool()
                actions.perform(self)
                return job
            }
        }
        // Idle: over width (a blocked worker came back) or nothing to do.
        if wasSearching {
            wasSearching = false
            addSearching(t, -1)
        }
        tiers[t].running -= 1
        tiers[t].idle.append(worker)
        publishIdleLocked(t)
        worker.isIdle = true
        worker.event.reset()
        setIdleDeadlineLocked(worker)
        if !background && runQueues.hasWork(background: true) {
            // No normal work is left: waiting background work may start now.
            offerWorkLocked(background: true, &actions)
        }
        unlockPool()
        actions.perform(self)
        return nil
    }

    /// An idle background worker parks until waiting background work ages (a normal one: no
    /// such deadline). Out of line, like `offerAgingBackgroundLocked`. Caller holds lock.
    @inline(never)
    private func setIdleDeadlineLocked(_ worker: PoolWorker) {
        worker.idleDeadline = worker.background ? runQueues.backgroundAgingDeadline() : nil
    }

    /// Moves the newer half of a busy worker's local queue to `thief`'s (empty) one and returns its
    /// first job. Caller holds lock; the two local locks are taken under it, one victim at a time.
    private func stealLocked(for thief: PoolWorker, _ t: Int, _ actions: inout Actions) -> (DispatchEntry, Int)? {
        for victim in tiers[t].workers where victim !== thief && !victim.isIdle {
            victim.localLock.lock()
            let count = victim.local.count
            guard count > 0 else {
                victim.localLock.unlock()
                continue
            }
            thief.localLock.lock()
            let level = victim.localLevel
            thief.localLevel = level
            // The newest `(count + 1) / 2`, in their order.
            for _ in 0..<(count + 1) / 2 { thief.local.prepend(victim.local.popLast()!) }
            let first = thief.local.popFirst()!
            thief.localLock.unlock()
            victim.localLock.unlock()
            if !thief.local.isEmpty { watchLocked(t, batches: true, &actions) }
            return (first, level)
        }
        return nil
    }

    /// Puts the unstarted rest of `worker`'s local queue back in its level (another level waits:
    /// at the front; jobs of its own level waited: at the back) and lets another worker take it.
    /// Worker's thread.
    func giveBack(_ worker: PoolWorker, toFront: Bool) {
        lockPool()
        giveBackLocked(worker, toFront: toFront)
        var actions = Actions()
        offerWorkLocked(background: worker.background, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// Returns `worker`'s unstarted batch to the front of its level. Caller holds `lock` (any thread:
    /// the monitor takes a stalled worker's batch back).
    func giveBackLocked(_ worker: PoolWorker, toFront: Bool = true) {
        worker.localLock.lock()
        defer { worker.localLock.unlock() }
        guard !worker.local.isEmpty else { return }
        runQueues.giveBack(worker.local, level: worker.localLevel, atFront: toFront)
        publishNonEmptyLocked()
    }

    /// Called by an idle worker whose sleep ended without being woken. `.woken`: a waker took it off
    /// the idle stack concurrently (it is counted running; its event is about to be set); `.work`:
    /// aged background work may run (it took itself off, counted running); `.sleep`: sleep on until
    /// the deadline; `.retire`: it has been removed and its thread ends.
    enum IdleVerdict { case woken, work, sleep(ContinuousClock.Instant), retire }

    func idleTimedOut(_ worker: PoolWorker, idleSince: ContinuousClock.Instant) -> IdleVerdict {
        let t = worker.background ? 1 : 0
        return withPoolLock {
            // Woken concurrently: the waker counted it running already.
            guard worker.isIdle else { return .woken }
            if worker.background && runQueues.backgroundAdmissible() && tiers[1].running < width {
                tiers[1].idle.removeAll { $0 === worker }
                publishIdleLocked(1)
                worker.isIdle = false
                tiers[1].running += 1
                return .work
            }
            let retireAt = idleSince + DispatchPool.idleTimeout
            let now = ContinuousClock.now
            if now >= retireAt {
                tiers[t].idle.removeAll { $0 === worker }
                publishIdleLocked(t)
                tiers[t].workers.removeAll { $0 === worker }
                worker.isIdle = false
                tiers[t].threads -= 1
                return .retire
            }
            // An aging instant already past (the tier is at width) is no reason to wake again.
            let aging = worker.background ? runQueues.backgroundAgingDeadline().flatMap { $0 > now ? $0 : nil } : nil
            return .sleep(aging.map { min($0, retireAt) } ?? retireAt)
        }
    }

    /// `worker` is about to park inside a ThreadKit wait while running a job: another worker may
    /// take its place at once. `wasStalled`: the monitor counted it stalled already.
    func workerWillBlock(_ worker: PoolWorker, wasStalled: Bool) {
        let t = worker.background ? 1 : 0
        lockPool()
        if wasStalled { tiers[t].stalled -= 1 } else { tiers[t].running -= 1 }
        tiers[t].blocked += 1
        // The jobs it took with the blocked one must not wait for it.
        giveBackLocked(worker)
        var actions = Actions()
        offerWorkLocked(background: worker.background, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// `worker` resumed after such a park. The tier may be over width until a worker reaches a
    /// job boundary and goes idle.
    func workerDidUnblock(_ worker: PoolWorker) {
        let t = worker.background ? 1 : 0
        withPoolLock {
            tiers[t].blocked -= 1
            tiers[t].running += 1
        }
    }

    /// The monitor counted `worker` stalled while its job ran, and the job has ended: it counts as
    /// running again (the tier may be over width until a worker reaches a job boundary).
    func workerDidUnstall(_ worker: PoolWorker) {
        let t = worker.background ? 1 : 0
        withPoolLock {
            tiers[t].stalled -= 1
            tiers[t].running += 1
        }
    }

    /// Starts `count` workers of a tier. A thread inherits its creator's nice value and scheduling
    /// policy, and an unprivileged process cannot raise them again: a normal worker started by a
    /// background worker (background work submitting to a default-QoS queue while no normal
    /// worker is idle) would run at nice 10 and SCHED_BATCH for good. So a background worker hands
    /// such starts to the monitor, which runs at the normal class; any other thread that starts a
    /// worker makes sure the monitor runs (it is started once, by such a thread, and stays).
    func startWorkers(_ count: Int, background: Bool) {
        if DispatchPool.onBackgroundWorker {
            if !background && delegateNormalStartsToMonitor(count) { return }
        } else {
            var actions = Actions()
            withPoolLock { ensureMonitorLocked(&actions) }
            perform(actions.monitor)
        }
        for _ in 0..<count { startWorker(background: background) }
    }

    func startWorker(background: Bool) {
        let t = background ? 1 : 0
        let worker = PoolWorker(pool: self, background: background)
        let number = withPoolLock { () -> Int in
            nextWorkerNumber += 1
            tiers[t].workers.append(worker)
            return nextWorkerNumber
        }
        let thread = TKThread(name: background ? "tk.dispatch.bg.\(number)" : "tk.dispatch.\(number)") { worker.run() }
        if background { thread.qualityOfService = .background }
        do {
            try thread.startOrThrow()
            if reportedStartFailure.load(ordering: .relaxed) == 1 && reportedStartFailure.compareExchange(
                expected: 1, desired: 2, ordering: .relaxed).exchanged {
                SystemCall.report("ThreadKit: the dispatch pool started a worker thread again; the work queued meanwhile runs now.")
            }
        } catch {
            // The OS refused a thread: give the slot back, and let ThreadStartRetry try again (with
            // back-off) so the queued work runs once a thread can start, even if nothing else is
            // ever submitted.
            let queued = withPoolLock { () -> Int in
                tiers[t].workers.removeAll { $0 === worker }
                tiers[t].threads -= 1
                tiers[t].running -= 1
                addSearching(t, -1)
                return runQueues.totalCount
            }
            if reportedStartFailure.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged {
                SystemCall.report("ThreadKit: the dispatch pool could not start a worker thread (\(error)). \(queued) job(s) "
                                  + "wait; ThreadKit retries with back-off (up to 1 s) and runs them once a thread can start. "
                                  + "(Reported once.)")
            }
            ThreadStartRetry.shared.register(self) { [self] in retryWorkers() }
        }
    }

    /// ThreadStartRetry's round for the pool: offer the waiting work to each tier again (starting
    /// a worker where none searches; a failure registers the next retry).
    private func retryWorkers() {
        lockPool()
        var actions = Actions(), background = Actions()
        offerWorkLocked(background: false, &actions)
        offerWorkLocked(background: true, &background)
        unlockPool()
        actions.perform(self)
        background.perform(self)
    }

    // MARK: Observing (tests)

    struct Snapshot {
        let threads: Int; let running: Int; let blocked: Int; let stalled: Int; let idle: Int; let searching: Int
    }

    func snapshot(background: Bool = false) -> Snapshot {
        let t = background ? 1 : 0
        return withPoolLock { Snapshot(threads: tiers[t].threads, running: tiers[t].running, blocked: tiers[t].blocked,
                                          stalled: tiers[t].stalled, idle: tiers[t].idle.count, searching: tiers[t].searching) }
    }
}

