// DispatchPool: the one thread pool under every queue but the main one (docs/DispatchPool.md,
// "What wakes a worker"). The shell around `PoolScheduler`, which makes every scheduling decision:
// this file holds the scheduler under `lock`, calls its transitions, and carries out what they
// planned (sets a worker's event, starts a thread, wakes the monitor) after unlocking.
//
// Who touches what:
// - `lock` (a DispatchLock, a leaf: nothing is locked or woken while it is held) guards the
//   scheduler, the monitor's state and the counters below; it is always taken and released
//   through `lockPool`/`tryLockPool`/`unlockPool`, which also move staged jobs into the run queues.
// - Producers never take `lock` on their fast path: a submission from any thread that is not a
//   worker of the job's tier goes to the producer's staging shard (`InjectionStage`, its own
//   per-shard lock); the submission that raises the stage's `pending` flag while a worker must be
//   woken claims an idle one from the tier's idle word (`IdleWord`, its own leaf lock), and tries
//   `lock` once only when a thread must start (docs/DispatchPool.md, "The idle word").
// - Each tier's `IdleWord` (searching, running, idle, the idle stack) is the scheduler's, reached
//   without `lock` through `wordNormal`/`wordBackground`; the mirrors (`nonEmptyMirror`,
//   `monitorAwakeMirror`) are copies of scheduler state published at every release of `lock`.
// - A job submitted by a job running on a worker goes to that worker's local queue (`LocalQueue`:
//   the worker pushes and pops it without a lock; thieves claim jobs from it holding `lock`).
import CThreadKit
import Glibc
import Synchronization

// safety: the scheduler, the monitor's state and the counters below are reached only under `lock`
// (the addressors and `…Locked` functions); everything else is atomic, immutable after init, or
// has a lock or protocol of its own (the stage's shards, each worker's `LocalQueue`).
final class DispatchPool: @unchecked Sendable {
    static let shared = DispatchPool()

    typealias Scheduler = PoolScheduler<PoolWorker>
    typealias Tier = Scheduler.Tier

    /// Workers of one tier may run this many jobs at once (not counting blocked ones): the CPUs this
    /// process may use when the pool starts (affinity mask and cgroup quota, `CPUBudget`), or
    /// `TK_CPU_BUDGET` (for testing).
    let width: Int
    /// No tier ever has more threads than this, blocked and stalled ones included: libdispatch's
    /// Linux cap (255), or 8 per CPU of the width on machines wider than 32, so the cap grows with
    /// the machine and never falls below libdispatch's. Reaching it is said once on stderr
    /// (`reportThreadCapReached`).
    let threadCap: Int
    static func threadCap(width: Int) -> Int { max(width, min(max(255, 8 * width), 4_096)) }
    /// An idle worker's thread ends after this long without work (2 s), in `RunQueues.stamp`
    /// nanoseconds: the scheduler's and the worker's sleep both count in them.
    static let idleTimeoutNanoseconds: UInt64 = 2_000_000_000
    /// A worker's local queue holds at most this many jobs: a batch from the run queues (at most
    /// half of it, `PoolScheduler.batchLimit`) and the jobs its running job submitted.
    static let localCapacity = LocalQueue<DispatchEntry>.capacity
    /// Jobs the running job may have waiting on its worker's local queue (beside the batch); more
    /// go to the run queues (docs/DispatchPool.md, "Local queues and stealing").
    static let localLimit = 32
    /// Local jobs a worker starts in a row while jobs of the same level wait in the run queues,
    /// before its local queue goes behind them. Counts only jobs its own jobs submitted: a batch
    /// was taken from the front of the run queue, ahead of what waits there.
    static let localStreakLimit = 8
    /// Where a local queue given back waits on its way to the run queues (a batch goes straight
    /// from the run queue into the local queue). Guarded by `lock`; empty outside it.
    let localScratch = JobRing<DispatchEntry>(capacity: DispatchPool.localCapacity)

    /// Taken only through `lockPool`, `tryLockPool` and `unlockPool` (which drain `stage`).
    let lock = DispatchLock()
    /// Where producers put their submissions (docs/DispatchPool.md, "Staging").
    let stage: InjectionStage
    /// The scheduler, guarded by lock. Kept in memory of its own (the pool lives as long as the
    /// process) and reached through addressors: a stored property of a class pays a runtime
    /// exclusivity check on every access, which showed on the submit path.
    ///
    /// Mutating calls get its address. A *non-mutating* method called out of line does not: swiftc
    /// (6.x) borrows a struct this large (185 bytes) from memory by copying it to the stack first,
    /// through this addressor and through `schedulerStorage.pointee` alike (checked with
    /// `-emit-assembly` on a reduced copy: a `memcpy` before the call, gone for a `mutating` method
    /// or a static one over an `UnsafePointer`). `PoolScheduler` being `~Copyable` rules out the
    /// copy that retains its arrays, not this bitwise one, so the non-mutating methods the pool
    /// calls under the lock (`saturatedWithWork`, `published`, the tier subscript's `_read`) are
    /// `@inline(__always)`; `invariantHolds` and the state descriptions, debug and diagnostics
    /// only, are not.
    // safety: allocated and initialized in init, freed in deinit (never, for `shared`); every
    // access goes through the addressors below, under `lock`, so no two overlap.
    private let schedulerStorage: UnsafeMutablePointer<Scheduler>
    var scheduler: Scheduler {
        // safety: `schedulerStorage` lives as long as `self`; the caller holds `lock` (checked in
        // debug builds).
        unsafeAddress {
            lock.assertHeld("DispatchPool.lock")
            return UnsafePointer(schedulerStorage)
        }
        // safety: as above; the mutable borrow is exclusive because the lock is.
        unsafeMutableAddress {
            lock.assertHeld("DispatchPool.lock")
            return schedulerStorage
        }
    }
    /// `scheduler.runQueues.nonEmpty` as of the last release of `lock`: a worker between the jobs
    /// of its batch reads it without the lock to see whether more important work has arrived.
    /// Relaxed for a normal worker: a stale value only delays that check by one job. A
    /// background worker's check is a rule (background waits while normal work waits), so it
    /// also carries `normalBeingDrained`, set before a drain may lower the stage's normal flag.
    let nonEmptyMirror = Atomic<UInt8>(0)
    /// A bit of `nonEmptyMirror` above the levels' bits: normal work is being drained. A holder
    /// sets it (sequentially consistent) before a drain that may lower the stage's normal flag,
    /// and the exact mirror stored at its unlock clears it. A background worker between jobs
    /// loads the flag and then the mirror (both sequentially consistent): if the first load sees
    /// the flag lowered, the second sees this bit or the mirror stored at the unlock, which shows
    /// the drained work. Without it, a drain's window (flag lowered, mirror not yet stored) let a
    /// background job start while the normal work drained in it waited (Models/Admission.pml,
    /// -DNO_DRAINING_MARK). Normal workers mask it out.
    static let normalBeingDrained: UInt8 = 0x80
    /// Per tier, the scheduler's idle word (`scheduler[tier].word`), reached without `lock`. Its
    /// read-modify-writes and loads are sequentially consistent: a producer that raised the
    /// stage's flag loads it to decide whether a worker must be woken; a worker that goes idle, or
    /// a searcher that found a job, changes it, releases `lock` and then loads the flag (both
    /// sides of a Dekker pair: one of the two sees the other, so the staged job is either offered
    /// by the producer or drained by the worker; Models/PoolIdleWord.pml checks it).
    ///
    /// Unretained, and used only through `withIdleWord`: a strong reference taken per submission
    /// retained and released the object, two atomic read-modify-writes by every producer on the
    /// cache line the word shares with the reference count (throughput of "global async, 1
    /// producer" fell by a fifth).
    // safety: the scheduler's tiers hold both words strongly for the life of the pool (the shared
    // pool lives as long as the process), so the unretained references never dangle.
    private let wordNormal: Unmanaged<IdleWord<PoolWorker>>
    private let wordBackground: Unmanaged<IdleWord<PoolWorker>>
    @inline(__always) func withIdleWord<R>(_ t: Int, _ body: (IdleWord<PoolWorker>) -> R) -> R {
        // safety: see `wordNormal`.
        (t == 0 ? wordNormal : wordBackground)._withUnsafeGuaranteedRef(body)
    }
    /// Tier `t`'s counters now: one sequentially consistent load of its idle word.
    @inline(__always) func idleCounts(_ t: Int) -> IdleCounts { withIdleWord(t) { $0.counts } }
    /// `monitor.awake` as of the last release of `lock`, sequentially consistent for the same
    /// Dekker pairing: a producer whose job no worker will visit soon makes sure the monitor looks.
    let monitorAwakeMirror = Atomic<Bool>(false)
    /// Idle workers polling their event before they park, and how many may (a quarter of the width,
    /// at least 2: both workers of a 2-CPU machine, as before). Relaxed: a count that is off for a
    /// moment only lets one more or one fewer worker poll.
    let idleSpinners = Atomic<Int>(0)
    let maxIdleSpinners: Int
    /// The monitor's state, guarded by lock; in memory of its own like the scheduler.
    // safety: allocated in init, freed in deinit; read and written only under `lock`.
    let monitor: UnsafeMutablePointer<MonitorState>
    /// Set to wake the monitor thread (docs/DispatchPool.md, "Workers blocked outside ThreadKit").
    let monitorEvent = ParkingEvent()
    // safety: this and the two counters below are touched only by the holder of `lock`, so
    // accesses never overlap; the runtime check would cost on every locked section.
    @exclusivity(unchecked) private var nextWorkerNumber = 0 // guarded by lock
    /// Acquisitions of `lock` (TKPoolIntrospection), guarded by lock: a plain increment by each
    /// holder, so counting adds no atomic operation and no shared cache line of its own.
    // safety: only by the holder of `lock` (as `nextWorkerNumber`).
    @exclusivity(unchecked) private var lockAcquisitions = 0
    /// Those made by a submission (the only times a producer takes it: a thread must start, a
    /// background worker must be woken, or the monitor must look), guarded by lock like
    /// `lockAcquisitions`.
    // safety: only by the holder of `lock` (as `nextWorkerNumber`).
    @exclusivity(unchecked) private var submitterLockAcquisitions = 0
    /// Set once the thread cap has been reported (`reportThreadCapReached`).
    private let reportedThreadCap = Atomic<Bool>(false)
    /// Set once the pids reserve has been reported (`reportPidsReserveReached`).
    private let reportedPidsReserve = Atomic<Bool>(false)
    /// 0: no worker start has failed; 1: one did and was reported; 2: a start succeeded after that
    /// and was reported too. Each report is made once per process.
    private let reportedStartFailure = Atomic<Int>(0)

    private init() {
        width = CPUBudget.poolWidth()
        threadCap = DispatchPool.threadCap(width: width)
        maxIdleSpinners = max(2, width / 4)
        stage = InjectionStage(width: width)
        // safety: both freed in deinit.
        let storage = UnsafeMutablePointer<Scheduler>.allocate(capacity: 1)
        storage.initialize(
            to: Scheduler(
                width: width, threadCap: threadCap,
                idleTimeout: DispatchPool.idleTimeoutNanoseconds,
                roomForReplacement: { PidsBudget.headroom() }))
        // safety: held by the scheduler (`wordNormal`).
        wordNormal = .passUnretained(storage.pointee[.normal].word)
        wordBackground = .passUnretained(storage.pointee[.background].word)
        schedulerStorage = storage
        // safety: freed in deinit.
        monitor = .allocate(capacity: 1)
        monitor.initialize(to: MonitorState())
    }

    /// Never runs for `shared` (it lives as long as the process); frees what init allocated.
    deinit {
        schedulerStorage.deinitialize(count: 1)
        schedulerStorage.deallocate()
        monitor.deinitialize(count: 1)
        monitor.deallocate()
    }

    /// What a locked section decided to do once the lock is released: per tier, at most one worker
    /// to wake or one to start (a tier's offer plans one only while nobody searches, and the plan
    /// makes the worker its searcher, so a second offer to the same tier in the same section plans
    /// nothing), and the monitor's action.
    ///
    /// One slot per tier, not one in all: a section may offer to both tiers (a normal worker that
    /// takes a job chains the next normal searcher and lets aged background work start; the
    /// monitor scans both tiers). With one shared slot the second plan overwrote the first, and
    /// the overwritten worker was counted searching but never woken: its tier's `searching` stayed
    /// 1 for good, every later offer to that tier waited for that searcher, and the pool ran
    /// nothing more (docs/DispatchPool.md, "The wedge of 2026-11-25"; Models/PoolWedge.pml).
    struct Actions {
        private var wakeNormal: PoolWorker?
        private var wakeBackground: PoolWorker?
        private var startNormal = false
        private var startBackground = false
        var monitor = MonitorAction.none

        /// Records `plan`, made for `tier`.
        mutating func add(_ plan: Scheduler.Plan, _ tier: Tier) {
            switch plan {
            case .none: return
            case .wake(let worker):
                assert(worker.background == tier.isBackground)
                assert(!plansWorker(tier), "DispatchPool: two workers planned for the \(tier) tier in one section")
                if tier == .normal { wakeNormal = worker } else { wakeBackground = worker }
            case .start:
                assert(!plansWorker(tier), "DispatchPool: two workers planned for the \(tier) tier in one section")
                if tier == .normal { startNormal = true } else { startBackground = true }
            }
        }

        /// Whether a worker is planned for `tier`.
        func plansWorker(_ tier: Tier) -> Bool {
            tier == .normal ? wakeNormal != nil || startNormal : wakeBackground != nil || startBackground
        }

        mutating func perform(_ pool: DispatchPool) {
            wakeNormal?.event.set()
            wakeBackground?.event.set()
            if startNormal { pool.startWorkers(1, background: false) }
            if startBackground { pool.startWorkers(1, background: true) }
            pool.perform(monitor)
        }
    }

    // MARK: The lock and the stage

    /// Takes the pool's lock and moves the staged jobs of `tiers` (`Tier.bit`s;
    /// both by default) into the run queues, before anything else looks at them: a producer's
    /// staged jobs go in before its next one. A normal worker's visit for its next job drains its
    /// own tier, and a producer that must wake a worker for its job drains that job's tier: neither
    /// moves a background flood staged before an interactive job on the way to starting it (the
    /// flood's own busy worker drains it; docs/DispatchPool.md, "One flag per tier"). A background
    /// drain always takes the normal tier's staged jobs too (`InjectionStage.tiersToDrain`). Another
    /// tier's raised flag is seen by `unlockPool`, which drains it unless a busy worker of that
    /// tier will.
    @inline(__always)
    func lockPool(draining tiers: UInt8 = InjectionStage.allTiers) {
        lock.lock()
        lockAcquisitions &+= 1
        drainStageLocked(tiers)
    }

    /// `lockPool(draining:)` if the lock is free now.
    @inline(__always)
    func tryLockPool(draining tiers: UInt8 = InjectionStage.allTiers) -> Bool {
        guard lock.tryLock() else { return false }
        lockAcquisitions &+= 1
        drainStageLocked(tiers)
        return true
    }

    /// Drains the stage for a visit asked to drain `tiers`, if a flag of the tiers the drain takes
    /// (`InjectionStage.tiersToDrain`: a background drain takes both) is raised. The relaxed look
    /// only skips the call; `drain` lowers the flags with a sequentially consistent
    /// read-modify-write. Caller holds lock.
    @inline(__always)
    private func drainStageLocked(_ tiers: UInt8) {
        lock.assertHeld("DispatchPool.lock")
        let tiers = InjectionStage.tiersToDrain(tiers)
        guard stage.pending.load(ordering: .relaxed) & tiers != 0 else { return }
        // The drain may lower the normal flag (also one raised after the look above): mark the
        // mirror first. Only while a background worker may be between jobs without the lock
        // (running, or stalled and about to come back on its own); the others take the lock
        // before they look at their local queue again.
        if tiers & Tier.normal.bit != 0 && scheduler[.background].running + scheduler[.background].stalled > 0 {
            let mirror = nonEmptyMirror.load(ordering: .relaxed) // written only under the lock
            if mirror & Self.normalBeingDrained == 0 {
                nonEmptyMirror.store(mirror | Self.normalBeingDrained, ordering: .sequentiallyConsistent)
            }
        }
        stage.drain(tiers, into: &scheduler.runQueues)
    }

    /// Offers the work drained while the lock was held, publishes the mirrors, releases the lock,
    /// and — if a producer staged a job meanwhile that no busy worker of its tier is sure to drain,
    /// and the lock is free — takes it again to drain (the holder's half of the staging handshake;
    /// docs/DispatchPool.md, "Staging").
    @inline(__always)
    func unlockPool() {
        releaseOfferingDrained()
        if stage.pending.load(ordering: .sequentiallyConsistent) != 0 { drainStageAfterUnlock() }
    }

    /// Releases the lock, having planned a worker for each tier that drained jobs arrived in, and
    /// carries those plans out.
    @inline(__always)
    private func releaseOfferingDrained() {
        guard stage.drainedTiers != 0 else {
            publishMirrorsLocked()
            return lock.unlockSequentiallyConsistent()
        }
        let tiers = stage.drainedTiers
        stage.drainedTiers = 0
        var actions = Actions()
        for tier in Tier.allCases where tiers & tier.bit != 0 { offerWorkLocked(tier, &actions) }
        publishMirrorsLocked()
        lock.unlockSequentiallyConsistent()
        actions.perform(self)
    }

    @inline(__always)
    func withPoolLock<T>(_ body: () throws -> T) rethrows -> T {
        lockPool()
        defer { unlockPool() }
        return try body()
    }

    /// Drains for producers that staged while this thread held the lock, while a tier's flag stays
    /// raised with nobody of the tier sure to drain it, and the lock is free (a busy lock's holder
    /// does it when it unlocks).
    private func drainStageAfterUnlock() {
        while true {
            let owed = tiersOwedADrain(raised: stage.pending.load(ordering: .sequentiallyConsistent))
            guard owed != 0, tryLockPool(draining: owed) else { return }
            releaseOfferingDrained()
        }
    }

    /// Of the tiers whose flag is raised in `raised`, those that no worker of theirs is sure to
    /// drain: the rule a producer applies when it raises the flag (`Scheduler.submitterTriesLock`)
    /// — a searcher, or `width` running workers with the monitor awake, take the lock soon. Safe
    /// for the same reason (the Dekker pairing in `wordNormal`'s comment): these word loads come
    /// after the load that saw the flag raised, so a worker that stops running or searching later
    /// changes the word later, and then loads the flag and drains (Models/PoolWedge.pml,
    /// Models/PoolIdleWord.pml).
    @inline(__always)
    private func tiersOwedADrain(raised: UInt8) -> UInt8 {
        var owed: UInt8 = 0
        for tier in Tier.allCases where raised & tier.bit != 0 {
            let counts = idleCounts(tier.rawValue)
            if Scheduler.submitterTriesLock(
                raisedPending: true, searching: counts.searching, running: counts.running, width: width,
                monitorAwake: { monitorAwakeMirror.load(ordering: .sequentiallyConsistent) })
            {
                owed |= tier.bit
            }
        }
        return owed
    }

    /// Copies the scheduler's state that other threads read without the lock to its mirrors, each
    /// only when it changed (a store per release would move the lines to this thread every time).
    /// Caller holds lock, and releases it right after (sequentially consistent).
    @inline(__always)
    private func publishMirrorsLocked() {
        lock.assertHeld("DispatchPool.lock")
        let bits = scheduler.runQueues.nonEmpty
        if nonEmptyMirror.load(ordering: .relaxed) != bits { nonEmptyMirror.store(bits, ordering: .relaxed) }
        let awake = monitor.pointee.awake
        if monitorAwakeMirror.load(ordering: .relaxed) != awake { monitorAwakeMirror.store(awake, ordering: .sequentiallyConsistent) }
    }

    // MARK: Submitting

    /// Appends `entry` to the run queue of `level` (through the stage) or the submitting worker's
    /// local queue, and makes sure a worker will run it.
    func submit(_ entry: consuming DispatchEntry, level: Int) {
        // Submitted by a job running on a worker of the right tier: its local queue, no lock.
        if let raw = tk_pool_worker_get() {
            // safety: the thread-local is set by `PoolWorker.run` to its own worker and cleared
            // before it returns, so a non-nil value is this thread's worker, alive while it runs.
            let worker = Unmanaged<PoolWorker>.fromOpaque(raw).takeUnretainedValue()
            if worker.background == (level == RunQueues.background) && worker.mayPushLocal {
                switch worker.pushLocal(entry, level: level) {
                case .pushed(let before): return localPushed(worker, before: before)
                case .refused(let back):
                    worker.noteOverflow()
                    entry = back
                }
            }
        }
        submitShared(entry, level: level)
    }

    /// Whether the calling thread is a pool worker with nothing else waiting for it: its local
    /// queue is empty, and no run queue and no staging shard holds work (relaxed loads; a hint).
    /// A job that may wait a moment for more of its own work (a `TKOperationQueue` token that ran
    /// out of ready operations) asks this first, so it never holds up other work. Worker thread.
    var callerIsUnneededWorker: Bool {
        guard let raw = tk_pool_worker_get() else { return false }
        // safety: as in `submit`: a non-nil value is this thread's own worker, alive while it runs.
        let worker = Unmanaged<PoolWorker>.fromOpaque(raw).takeUnretainedValue()
        return worker.local.count == 0 && nonEmptyMirror.load(ordering: .relaxed) == 0
            && stage.pending.load(ordering: .relaxed) == 0
    }

    /// Appends `entry` to the calling thread's staging shard (never a local queue), without the
    /// pool's lock (docs/DispatchPool.md, "Submitting without the pool's lock", "The idle word"):
    /// - the stage's `pending` flag was up, and a worker of the job's tier runs or searches: the
    ///   drain the flag promises moves this job too, and that worker is on its way; done;
    /// - this call raised it, and the job's tier has a searcher, or all its `width` workers run,
    ///   and the monitor is awake: a worker (or the monitor's next tick) takes the lock soon and
    ///   drains; done (the Dekker pairing with a worker going idle is in `wordNormal`'s comment);
    /// - otherwise a worker must be woken. A normal job's producer claims an idle worker from the
    ///   tier's word (`IdleWord.claim`) and sets its event; the woken worker drains at its visit
    ///   to the lock (the event orders that visit after this staging). With nobody idle (a thread
    ///   must start), for a background job (its offer applies admission and aging), or while the
    ///   lock is held (its holder will see the flag), it tries the lock once; its holder drains,
    ///   offers the work and wakes or starts one (if another thread holds it, that holder sees the
    ///   flag when it unlocks).
    ///
    /// Why the flag alone is not enough when the tier has nobody running: it promises a drain, but
    /// not a prompt one — the thread it counts on may serve the other tier. An interactive job
    /// staged behind a background flood waited for the background worker (at the background OS
    /// class, on a CPU the producer held) to reach the lock: 9 µs from submit to the wake against
    /// libdispatch's 1.2 µs on one CPU (docs/DispatchPool.md, "A raised flag is not a wake").
    private func submitShared(_ entry: consuming DispatchEntry, level: Int) {
        let raised = stage.stage(entry, level: level)
        let tier = Tier(level: level)
        let t = tier.rawValue
        func step(claimFailed: Bool = false) -> Scheduler.SubmitterStep {
            Scheduler.submitterStep(
                raisedPending: raised, counts: idleCounts(t), width: width, lockFree: tier == .normal,
                claimFailed: claimFailed, monitorAwake: { monitorAwakeMirror.load(ordering: .sequentiallyConsistent) })
        }
        switch step() {
        case .done: return
        case .claim where lock.isLocked:
            // The pool's lock is held: take the old way (`tryLock`, which fails, and the holder
            // sees the flag when it unlocks). The holder is often a worker going idle, which then
            // claims itself, top of the stack, at no futex wake; a worker claimed here instead would
            // be woken from its sleep only to wait for that lock.
            break
        case .claim:
            switch withIdleWord(t, { $0.tryClaim(width: width) }) {
            case nil: break // the stack's lock is busy: the old way (`tryClaim` says why)
            case .claimed(let worker):
                worker.event.set()
                return
            case .busy, .noneIdle:
                // Another claim came first, or the idle worker retired meanwhile: decide again.
                if step(claimFailed: true) == .done { return }
            }
        case .tryLock: break
        }
        if tryLockPool(draining: InjectionStage.tierBit(level: level)) {
            submitterLockAcquisitions &+= 1
            unlockPool()
        }
    }

    /// Appends `count` copies of `entry` (tokens of a concurrent queue, helpers of concurrentPerform)
    /// to the run queues, never to a local queue: they are there to run side by side. One lock
    /// visit for the lot. The entry is copied: it must carry no group (`DispatchEntry.group` is
    /// unretained and left once per entry, so a copy would leave it twice).
    func submit(_ entry: DispatchEntry, level: Int, count: Int) {
        assert(count <= 1 || entry.group == nil, "DispatchPool: an entry with a group submitted \(count) times")
        guard count > 0 else { return }
        if count == 1 { return submitShared(entry, level: level) }
        lockPool()
        for _ in 0..<count { scheduler.submit(entry, level: level) }
        var actions = Actions()
        offerWorkLocked(Tier(level: level), &actions)
        unlockPool()
        actions.perform(self)
    }

    /// After `worker` put a job on its local queue (`before` were there already): the monitor must
    /// be watching (the job that pushed may run long, or block outside ThreadKit, with its
    /// continuation behind it), and, once a second job waits, an idle worker may come and steal
    /// (the job that pushed goes on running: a token loop, a drain, a fan-out). A lone
    /// continuation wakes nobody (tokio's LIFO-slot rule): its worker runs it when the job that
    /// pushed it ends, and the monitor or `willPark` hands it on if that job runs long or blocks
    /// (docs/DispatchPool.md, "Local queues and stealing"). Asked at 1, 2, 4, 8 and 16 jobs
    /// before, and only while an idle worker exists and nobody searches (the idle word, read
    /// without the lock), so a burst of local pushes visits the pool's lock a few times, not once
    /// per job, and a push with a searcher already on its way (the common case in a chain of hops)
    /// visits it not at all. Worker thread.
    private func localPushed(_ worker: PoolWorker, before: Int) {
        let t = Tier(background: worker.background).rawValue
        let wantMonitor = !monitorAwakeMirror.load(ordering: .relaxed)
        var wantThief = false
        if before != 0 && before & (before &- 1) == 0 {
            let counts = idleCounts(t)
            wantThief = counts.searching == 0 && counts.idle > 0
        }
        guard wantMonitor || wantThief else { return }
        lockPool()
        var actions = Actions()
        if wantMonitor { watchLocked(t, batches: true, &actions) }
        if wantThief { offerWorkLocked(Tier(background: worker.background), forStealing: true, &actions) }
        unlockPool()
        actions.perform(self)
    }

    /// The scheduler's wake decision for `tier`, recorded in `actions`; first makes sure the monitor
    /// watches if the tier cannot admit the work. Caller holds lock.
    func offerWorkLocked(_ tier: Tier, forStealing: Bool = false, _ actions: inout Actions) {
        lock.assertHeld("DispatchPool.lock")
        if !forStealing { watchLocked(tier.rawValue, batches: false, &actions) }
        actions.add(scheduler.offer(tier, forStealing: forStealing), tier)
        if scheduler.capReached { reportThreadCapReached() }
        if scheduler[tier].crowdWaiting {
            // A replacement was paced or refused: the monitor offers the tier again when due.
            if scheduler.pidsReserveReached { reportPidsReserveReached() }
            watchLocked(tier.rawValue, batches: false, &actions)
        }
    }

    // MARK: Workers

    /// The next job for `worker` (and, when its level is alone, its share of the backlog, up to
    /// `batchLimit - 1`, moved to
    /// the worker's local queue), or nil when it must go idle (it is then on the idle stack and
    /// `idleDeadline` says until when it sleeps). Worker's thread.
    func nextJob(for worker: PoolWorker, wasSearching: inout Bool) -> (DispatchEntry, Int)? {
        let tier = Tier(background: worker.background)
        // Drains the worker's own tier: for a background worker that is both tiers
        // (`InjectionStage.tiersToDrain`), because the admission rule it is about to apply
        // (background waits while normal work waits) must see every normal job staged so far,
        // also when only the normal tier's flag is raised.
        lockPool(draining: tier.bit)
        var actions = Actions()
        var job: (DispatchEntry, Int)?
        switch scheduler.pop(tier) {
        case .job(let entry, let level, let batch):
            if batch > 0 {
                // The worker's queue is empty (it pops it first), so the batch fits: it is at most
                // half the capacity, and a claim in flight holds at most the other half.
                // Straight from the run queue into the local queue (the pool's lock keeps thieves
                // out, and the queue's owner is this thread).
                worker.local.beginBatch(count: scheduler.batchCount(level: level, max: batch))
                scheduler.takeBatch(level: level, max: batch) { worker.local.push($0, level: level) }
                // Jobs now wait in a batch: the monitor watches for the worker stalling.
                watchLocked(tier.rawValue, batches: true, &actions)
            }
            job = (entry, level)
        case .steal:
            job = stealLocked(for: worker, tier.rawValue, &actions)
        case .idle:
            break
        }
        if job != nil {
            let plans = scheduler.started(tier, wasSearching: &wasSearching)
            actions.add(plans.own, tier)
            actions.add(plans.background, .background)
        } else {
            // Reset before the push: a producer may claim the worker and set the event as soon as
            // it is on the stack, without this lock (Models/PoolIdleWord.pml, -DRESET_AFTER_PUSH).
            worker.event.reset()
            actions.add(scheduler.park(worker, wasSearching: &wasSearching), .background)
        }
        // Work a tier cannot admit now (it is at width) is the monitor's to watch (one load while
        // it is awake).
        watchLocked(tier.rawValue, batches: false, &actions)
        if tier == .normal { watchLocked(1, batches: false, &actions) }
        if scheduler.capReached { reportThreadCapReached() }
        unlockPool()
        actions.perform(self)
        return job
    }

    /// Moves the older half of a busy worker's local queue (tokio's rule: the jobs that waited
    /// longest) to `thief`'s (empty) one and returns the first of them. Caller holds lock (so one
    /// thief at a time; the victim pushes and pops on, without it: `LocalQueue`).
    private func stealLocked(for thief: PoolWorker, _ t: Int, _ actions: inout Actions) -> (DispatchEntry, Int)? {
        lock.assertHeld("DispatchPool.lock")
        for victim in scheduler[Tier(rawValue: t)!].workers where victim !== thief && !victim.isIdle {
            // The stolen jobs keep their batched marks: a batch's jobs stay a batch on the thief.
            guard let (first, level) = victim.local.stealHalf(into: thief.local) else { continue }
            if thief.local.count > 0 { watchLocked(t, batches: true, &actions) }
            return (first, level)
        }
        return nil
    }

    /// Puts the unstarted rest of `worker`'s local queue back in its level (another level waits:
    /// at the front; jobs of its own level waited: at the back) and lets another worker take it.
    /// Worker's thread.
    func giveBack(_ worker: PoolWorker, toFront: Bool, first: consuming (DispatchEntry, level: Int)?) {
        lockPool()
        giveBackLocked(worker, toFront: toFront, first: first)
        var actions = Actions()
        offerWorkLocked(Tier(background: worker.background), &actions)
        unlockPool()
        actions.perform(self)
    }

    /// Returns `worker`'s unstarted local jobs to its level (`first`, the one the worker popped
    /// and does not run, ahead of them), at the front unless `toFront` is false. Caller holds
    /// `lock` (any thread: the monitor takes a stalled worker's jobs back; the worker its own).
    func giveBackLocked(
        _ worker: PoolWorker, toFront: Bool = true, first: consuming (DispatchEntry, level: Int)? = nil
    ) {
        lock.assertHeld("DispatchPool.lock")
        var level: Int?
        if let (entry, firstLevel) = first {
            localScratch.append(entry)
            level = firstLevel
        }
        if let taken = worker.local.stealAll(into: localScratch) { level = taken }
        guard let level, !localScratch.isEmpty else { return }
        scheduler.runQueues.giveBack(localScratch, level: level, atFront: toFront)
    }

    /// Called by an idle worker whose sleep ended without being woken (see
    /// `PoolScheduler.IdleVerdict`). `idleSince`: a `RunQueues.stamp`. The pool has been quiet for
    /// this worker's idle time: the run queues and the stage give back the buffers a burst grew
    /// and nothing has needed since (`JobRing.settle`; after a burst, a worker's idle timeout is
    /// the last moment anyone looks at them).
    func idleTimedOut(_ worker: PoolWorker, idleSince: UInt64) -> Scheduler.IdleVerdict {
        withPoolLock {
            let now = scheduler.runQueues.clock()
            scheduler.runQueues.settleRings(now: now)
            stage.settleRings(now: now)
            return scheduler.idleTimedOut(worker, idleSince: idleSince)
        }
    }

    /// `worker` is about to park inside a ThreadKit wait while running a job: another worker may
    /// take its place at once. `wasStalled`: the monitor counted it stalled already.
    func workerWillBlock(_ worker: PoolWorker, wasStalled: Bool) {
        let tier = Tier(background: worker.background)
        lockPool()
        scheduler.block(tier, wasStalled: wasStalled)
        // The jobs it took with the blocked one must not wait for it.
        giveBackLocked(worker)
        var actions = Actions()
        offerWorkLocked(tier, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// `worker` resumed after such a park. The tier may be over width until a worker reaches a
    /// job boundary and goes idle.
    func workerDidUnblock(_ worker: PoolWorker) {
        withPoolLock { scheduler.unblock(Tier(background: worker.background)) }
    }

    /// The monitor counted `worker` stalled while its job ran, and the job has ended: it counts as
    /// running again (the tier may be over width until a worker reaches a job boundary).
    func workerDidUnstall(_ worker: PoolWorker) {
        withPoolLock { scheduler.unstall(Tier(background: worker.background)) }
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
        let tier = Tier(background: background)
        let worker = PoolWorker(pool: self, background: background)
        let number = withPoolLock { () -> Int in
            nextWorkerNumber += 1
            scheduler.register(worker)
            return nextWorkerNumber
        }
        let thread = TKThread(name: background ? "tk.dispatch.bg.\(number)" : "tk.dispatch.\(number)") { worker.run() }
        if background { thread.qualityOfService = .background }
        do {
            try thread.startOrThrow()
            if reportedStartFailure.load(ordering: .relaxed) == 1
                && reportedStartFailure.compareExchange(
                    expected: 1, desired: 2, ordering: .relaxed
                ).exchanged
            {
                SystemCall.report("ThreadKit: the dispatch pool started a worker thread again; the work queued meanwhile runs now.")
            }
        } catch {
            // The OS refused a thread: give the slot back, and let ThreadStartRetry try again (with
            // back-off) so the queued work runs once a thread can start, even if nothing else is
            // ever submitted.
            let queued = withPoolLock { () -> Int in
                scheduler.startFailed(tier, worker: worker)
                return scheduler.runQueues.totalCount
            }
            if reportedStartFailure.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged {
                SystemCall.report(
                    "ThreadKit: the dispatch pool could not start a worker thread (\(error)). \(queued) job(s) "
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
        var actions = Actions()
        offerWorkLocked(.normal, &actions)
        offerWorkLocked(.background, &actions)
        unlockPool()
        actions.perform(self)
    }

    /// Says once per process on stderr that the pool did not replace a blocked worker because the
    /// pids cgroup around the process is nearly full (`PidsBudget`). Caller holds lock.
    private func reportPidsReserveReached() {
        scheduler.pidsReserveReached = false
        guard !reportedPidsReserve.load(ordering: .relaxed), !reportedPidsReserve.exchange(true, ordering: .relaxed) else {
            return
        }
        let budget = PidsBudget.check()
        SystemCall.report(
            "ThreadKit: the dispatch pool is not starting more threads to replace blocked ones: the pids cgroup allows "
                + "\(budget.limit.map(String.init) ?? "?") tasks and \(budget.current) are in use; the pool leaves "
                + "\(PidsBudget.reserve(limit: budget.limit ?? 0)) of them to the rest of the program. Jobs wait until a "
                + "blocked one returns. (Reported once.)")
    }

    /// Says once per process on stderr that a tier has reached `threadCap` with work waiting: the
    /// work waits until one of the tier's threads finishes its job (libdispatch says nothing).
    /// Caller holds lock (the report itself is one write(2)).
    private func reportThreadCapReached() {
        scheduler.capReached = false
        guard !reportedThreadCap.load(ordering: .relaxed),
            !reportedThreadCap.exchange(true, ordering: .relaxed)
        else { return }
        SystemCall.report(
            "ThreadKit: the dispatch pool reached its cap of \(threadCap) threads per tier "
                + "(width \(width)); jobs wait until a thread's job ends. Most of its threads are blocked: "
                + "blocking many pool jobs on each other or on I/O starves the pool. (Reported once.)")
    }

    // MARK: Observing (tests, TKPoolIntrospection)

    struct Snapshot {
        let threads: Int
        let running: Int
        let blocked: Int
        let stalled: Int
        let idle: Int
        let searching: Int
    }

    func snapshot(background: Bool = false) -> Snapshot {
        withPoolLock {
            let s = scheduler[Tier(background: background)]
            let c = s.word.counts // one load: a concurrent claim moves idle to running
            return Snapshot(
                threads: s.threads, running: c.running, blocked: s.blocked, stalled: s.stalled,
                idle: c.idle, searching: c.searching)
        }
    }

    /// TKPoolIntrospection.poolLockAcquisitions (this read's own acquisition not counted).
    var lockAcquisitionCount: Int { withPoolLock { lockAcquisitions - 1 } }

    /// TKPoolIntrospection.poolLockAcquisitionsBySubmitters.
    var submitterLockAcquisitionCount: Int { withPoolLock { submitterLockAcquisitions } }

    /// TKPoolIntrospection.stateDescription.
    func stateDescription() -> String {
        withPoolLock {
            var text =
                "ThreadKit dispatch pool: width \(width), thread cap \(threadCap), lock acquisitions "
                + "\(lockAcquisitions), stage pending (tiers) \(stage.pending.load(ordering: .relaxed))\n"
            text += "run queues: \(scheduler.runQueues.stateDescription)\n"
            for tier in [Tier.normal, .background] {
                let s = scheduler[tier]
                text +=
                    "\(tier) tier: threads \(s.threads), running \(s.running), blocked \(s.blocked), "
                    + "stalled \(s.stalled), idle \(s.idleCount), searching \(s.searching)"
                    + (scheduler.invariantHolds(tier) ? "" : " (COUNTER INVARIANT BROKEN)") + "\n"
                for worker in s.workers {
                    let local = worker.local.count
                    let word = worker.activity.load(ordering: .relaxed)
                    text +=
                        "  worker tid \(worker.threadID.load(ordering: .relaxed)): \(worker.isIdle ? "idle" : "busy"), "
                        + "local \(local), activity \(word >> 2)\(word & 2 != 0 ? " in a job" : "")\(word & 1 != 0 ? " stalled" : "")\n"
                }
            }
            text += "monitor: running \(monitor.pointee.threadRunning), awake \(monitor.pointee.awake)\n"
            return text
        }
    }
}
