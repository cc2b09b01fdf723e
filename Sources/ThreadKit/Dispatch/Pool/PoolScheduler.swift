// PoolScheduler: every scheduling decision of the dispatch pool, as a plain value with no threads,
// no locks and no clock of its own (docs/DispatchPool.md, "The scheduler core"). It owns the run
// queues (and through them the QoS order and aging), the two tiers' counters, idle stacks and
// worker lists, and it decides — in named transitions — who is woken, started, parked or retired.
// `DispatchPool` is the shell: it holds the value under its lock, calls a transition, and carries
// out what the transition returned (sets a worker's event, starts a thread) after unlocking.
//
// Because nothing here blocks or reads a clock, the deterministic tests (PoolSchedulerTests) drive it
// with fake workers and a hand-moved clock, as tokio tests its idle state.
//
// Invariant, per tier, after every transition (asserted in debug builds):
//     threads == running + blocked + stalled + idleCount,  0 <= searching <= running,
//     every counter >= 0, threads <= threadCap, a worker is on the idle stack iff its isIdle.
// Not thread-safe: the owner (the pool) guards it with its lock. The exception is each tier's
// `IdleWord` (searching, running, idle and the idle stack): a producer may claim a wake there
// without the pool's lock, under the stack's own leaf lock, and the claim keeps running + idle,
// so the invariant still holds at every release of the pool's lock.

/// A worker as the scheduler sees it. `isIdle` and `nextIdle` are written only by its tier's
/// `IdleWord`, under the idle stack's lock (so possibly by a producer without the pool's lock);
/// `idleDeadline` only by the scheduler, under the pool's lock.
protocol PoolSchedulerWorker: AnyObject {
    /// Serves the background tier.
    var background: Bool { get }
    /// On its tier's idle stack.
    var isIdle: Bool { get set }
    /// A `RunQueues.clock` stamp at which an idle background worker wakes to see whether waiting
    /// background work has aged; 0: no such instant (it sleeps until woken or retired).
    var idleDeadline: UInt64 { get set }
    /// The worker below this one on its tier's idle stack (nil at the bottom, and while not idle).
    /// The stack's link, written only by the `IdleWord`.
    var nextIdle: Self? { get set }
}

struct PoolScheduler<Worker: PoolSchedulerWorker>: ~Copyable {
    enum Tier: Int, CaseIterable {
        case normal = 0, background = 1

        init(background: Bool) { self = background ? .background : .normal }
        /// The tier whose workers run run-queue level `level`.
        init(level: Int) { self.init(background: level == RunQueues.background) }
        var isBackground: Bool { self == .background }
        /// This tier's bit in a set of tiers (the stage's flags, a shard's `hasJobs`, the tiers a
        /// drain takes or a tick unstalled): 1 normal, 2 background.
        var bit: UInt8 { 1 << UInt8(rawValue) }
        /// Both tiers' bits.
        static var all: UInt8 { Tier.normal.bit | Tier.background.bit }
    }

    struct TierState {
        /// The tier's idle word (searching, running, idle) and idle stack, which a producer may
        /// claim a wake from without the pool's lock (`IdleWord`). One object per tier.
        let word: IdleWord<Worker>
        /// Workers parked inside a ThreadKit wait while running a job.
        var blocked = 0
        /// Workers the monitor found blocked outside ThreadKit while running a job.
        var stalled = 0
        /// Live worker threads, and those planned to start (running + blocked + stalled + idle).
        var threads = 0
        /// Every live worker (started), for stealing, the monitor and the state dump.
        var workers: [Worker] = []
        /// A start that would only join a crowd of blocked workers was refused (paced, or the
        /// pids cgroup's reserve): the monitor offers the tier again at `nextCrowdStart`.
        var crowdWaiting = false
        /// The clock stamp before which no further crowd start is made (`crowdInterval` after
        /// the last one, or after a refusal).
        var nextCrowdStart: UInt64 = 0

        init() { word = IdleWord() }

        /// Workers executing or about to execute a job (woken, started, or between jobs), not
        /// blocked, not stalled, not idle. In the word: a producer's claim raises it without the
        /// pool's lock. The setter is a load and an add, for single-threaded callers (tests); the
        /// transitions change the word with one read-modify-write (`IdleWord.add`).
        var running: Int {
            get { word.counts.running }
            set { word.add(running: newValue - word.counts.running) }
        }
        /// Workers woken or started that have not popped a job yet. While one searches, offers
        /// wake nobody else: the searcher wakes the next when it finds a job (tokio's
        /// `num_searching`, Go's `nmspinning`), so a burst costs one wake per idle→busy step. In
        /// the word, like `running`.
        var searching: Int {
            get { word.counts.searching }
            set { word.add(searching: newValue - word.counts.searching) }
        }
        /// Workers on the idle stack (the word's count).
        var idleCount: Int { word.counts.idle }
        /// The idle stack's top: the most recently idle worker (woken first: its cache is warm).
        var idleTop: Worker? { word.top }
        /// The idle stack from top to bottom (tests, the invariant check).
        var idleWorkers: [Worker] { word.workers }
    }

    /// What an offer decided for one tier.
    enum Plan {
        case none
        /// Set this worker's event: it is off the idle stack, counted running and searching.
        case wake(Worker)
        /// Start a thread: counted as a thread, running and searching.
        case start

        var isNone: Bool { if case .none = self { true } else { false } }
    }

    /// What a worker's visit found in the run queues.
    enum Next {
        /// Run this job of `level`; then move `batch` more of the level to the worker's local
        /// queue (`takeBatch`) and call `started`.
        case job(DispatchEntry, level: Int, batch: Int)
        /// The run queues hold nothing for the tier: try to steal from a busy worker, then call
        /// `started` (with the stolen job) or `park`.
        case steal
        /// Nothing the tier may run now (or the tier is over width): call `park`.
        case idle
    }

    /// A worker takes at most this many jobs of one level per visit: half its local queue's
    /// capacity (tokio moves half its local capacity from the inject queue in one visit), and
    /// only while no other level waits.
    static var batchLimit: Int { DispatchPool.localCapacity / 2 }

    /// The jobs a visit moves to the worker's local queue beyond the one it runs, from the
    /// `backlog` left in the level after that one: an equal share for each of the `width`
    /// workers (Go's `globrunqget`: len/GOMAXPROCS + 1, with the one it runs), at most
    /// `batchLimit - 1`.
    static func batchSize(backlog: Int, width: Int) -> Int { min(batchLimit - 1, backlog / width) }

    let width: Int
    let threadCap: Int
    /// Blocked and stalled workers a tier may have before a thread that replaces one more is paced
    /// to one per `crowdInterval` (`crowdLimit(width:)`).
    let crowdLimit: Int
    /// How many more threads beyond the width the OS leaves room for (the pool: the pids cgroups'
    /// reserve, `PidsBudget.headroom`; `Int.max` where no limit binds). Read only before a start
    /// that replaces a blocked worker, and then at most once per `crowdInterval`: the reading is a
    /// few small file reads, and the scheduler runs under the pool's lock.
    let roomForReplacement: () -> Int
    /// The last reading of `roomForReplacement`, less the replacements started since, and when it
    /// was read (0: never).
    private var pidsRoom = 0
    private var pidsReadAt: UInt64 = 0
    /// Set when a replacement was refused for want of room (the pool reports it once); cleared by
    /// the pool.
    var pidsReserveReached = false
    /// How long an idle worker lives without work, in clock nanoseconds.
    let idleTimeout: UInt64
    var runQueues: RunQueues
    /// The tiers' states, indexed by `Tier.rawValue`, reached through `subscript(tier)`. An
    /// InlineArray, whose own subscript is an addressor: a getter over a tuple copied the state
    /// (retaining and releasing its two arrays) on every counter read, and `_read`/`_modify`
    /// choosing between two properties (two yields) were not inlined (an out-of-line call and a
    /// copy of the scheduler per counter access); one yield into the InlineArray inlines.
    /// Built element by element: each tier has an idle word of its own.
    private var states = InlineArray<2, TierState> { _ in TierState() }
    /// Set when a tier wanted a thread at its cap (the pool reports it once); cleared by the pool.
    var capReached = false

    /// Replacements for blocked workers come at once while a tier has fewer than this many blocked
    /// or stalled workers: seven per CPU of width (libdispatch's dispatch_readsync.c runs eight
    /// workers per CPU that sleep between syncs), at most 248 (so width + 248 threads: libdispatch's
    /// own cap is 255). Past it, one per `crowdInterval`: a thread that only joins a crowd of blocked
    /// ones costs a pid, a stack and the monitor's looks, and gains nothing until one returns.
    static func crowdLimit(width: Int) -> Int { min(7 * width, 248) }

    /// One replacement per this many clock nanoseconds past `crowdLimit` (ten a second; libdispatch
    /// adds one a second on Linux).
    static var crowdInterval: UInt64 { 100_000_000 }

    init(
        width: Int, threadCap: Int, idleTimeout: UInt64, clock: @escaping () -> UInt64 = RunQueues.stamp,
        roomForReplacement: @escaping () -> Int = { Int.max }
    ) {
        precondition(width >= 1 && threadCap >= width, "PoolScheduler: width \(width), cap \(threadCap)")
        self.width = width
        self.threadCap = threadCap
        self.crowdLimit = Self.crowdLimit(width: width)
        self.roomForReplacement = roomForReplacement
        self.idleTimeout = idleTimeout
        runQueues = RunQueues(clock: clock)
    }

    /// `tier`'s state, borrowed or modified in place (one yield each, so both inline into the
    /// transitions: no copy of the state, no call per counter access).
    subscript(_ tier: Tier) -> TierState {
        @inline(__always) _read { yield states[tier.rawValue] }
        @inline(__always) _modify { yield &states[tier.rawValue] }
    }

    /// The invariant above, for `tier`: the word read once under the idle stack's lock, so a
    /// concurrent claim (which keeps running + idle) cannot fall between the reads.
    func invariantHolds(_ tier: Tier) -> Bool {
        let s = self[tier]
        return s.word.lock.withLock {
            let c = s.word.counts
            let idle = s.word.workersLocked
            return c.running >= 0 && s.blocked >= 0 && s.stalled >= 0 && c.searching >= 0
                && c.searching <= c.running && s.threads <= threadCap
                && s.threads == c.running + s.blocked + s.stalled + c.idle
                && idle.count == c.idle && idle.allSatisfy { $0.isIdle }
        }
    }

    @inline(__always)
    private func check(_ tier: Tier) {
        assert(invariantHolds(tier), "PoolScheduler: counter invariant broken for the \(tier) tier: \(self[tier])")
    }

    // MARK: Submit and offer

    /// A job arrives in the run queues (from a producer's stage, or `count` copies of a concurrent
    /// queue's token). The caller then offers the job's tier.
    mutating func submit(_ entry: consuming DispatchEntry, level: Int) {
        runQueues.push(entry, level: level)
    }

    /// The wake decision: a worker for `tier` if the tier may admit work (fewer than `width`
    /// running), work waits for it (in the run queues; `forStealing`: in a busy worker's local
    /// queue), and nobody searches already. Wakes the most recently idle worker, or plans a new
    /// thread below the cap. Background work that may not start yet (normal work waits and it has
    /// not aged) only makes sure a background worker will look when it ages.
    mutating func offer(_ tier: Tier, forStealing: Bool = false) -> Plan {
        let counts = self[tier].word.counts
        guard counts.searching == 0, counts.running < width,
            forStealing || runQueues.hasWork(background: tier.isBackground)
        else { return .none }
        if tier == .background && !forStealing && !runQueues.backgroundAdmissible() {
            return offerAgingBackground()
        }
        return wakeOrStart(tier)
    }

    /// Whether a producer that just staged a job must have a worker woken (by a claim, or through
    /// the pool's lock), from the job's tier's `searching` and `running` as its idle word holds
    /// them (docs/DispatchPool.md, "Submitting without the pool's lock"):
    /// - it raised the stage's `pending` flag: unless a searcher is on its way, whatever the
    ///   monitor does (the searcher takes the lock and drains; the monitor sleeps whenever no
    ///   worker is busy at its tick, most of the time in a single producer's flood, so asking it
    ///   here cost that flood a lock visit every few items: docs/journal/2026-11-29-idle-word.md),
    ///   or all `width` workers run and the monitor is awake (it drains within a tick if they
    ///   never return);
    /// - the flag was up already: its drain will move this job, but the flag does not say when —
    ///   the thread that will drain may serve the other tier — so only while nobody of the job's
    ///   tier runs or searches ("A raised flag is not a wake").
    /// `monitorAwake` is read only when it decides.
    static func submitterTriesLock(
        raisedPending: Bool, searching: Int, running: Int, width: Int, monitorAwake: () -> Bool
    ) -> Bool {
        if raisedPending { return searching == 0 && (running < width || !monitorAwake()) }
        return searching == 0 && running == 0
    }

    /// What a producer that staged a job does next, on the normal tier's word as it loaded it
    /// after staging (`counts`; `lockFree`: the job's tier may be woken without the pool's lock —
    /// the normal tier; the background tier's offer applies admission and aging, which read the
    /// run queues): nothing (`submitterTriesLock` says a worker is on its way); claim an idle
    /// worker (`IdleWord.claim`) and set its event; or try the pool's lock (a thread must start,
    /// or the monitor must look). docs/DispatchPool.md, "The idle word".
    ///
    /// `claimFailed`: asked again after a claim found no worker to take (`.busy`: another claim
    /// came first, and its searcher is on its way; `.noneIdle`: the idle worker retired), on the
    /// word as it is now. The producer's job is staged behind a raised flag either way, so the
    /// rule is the raised one, and the answer is never a second claim: done, or the lock.
    enum SubmitterStep: Equatable { case done, claim, tryLock }

    static func submitterStep(
        raisedPending: Bool, counts: IdleCounts, width: Int, lockFree: Bool, claimFailed: Bool = false,
        monitorAwake: () -> Bool
    ) -> SubmitterStep {
        guard
            submitterTriesLock(
                raisedPending: raisedPending || claimFailed, searching: counts.searching, running: counts.running,
                width: width, monitorAwake: monitorAwake)
        else { return .done }
        return lockFree && !claimFailed && counts.mayClaim(width: width) ? .claim : .tryLock
    }

    /// Claims an idle worker (`IdleWord.claim`: under the stack's lock, one read-modify-write), or
    /// plans a thread when none is idle. Under the pool's lock nobody pushes, so "none idle" stays
    /// true until the start is counted: a producer cannot claim meanwhile.
    private mutating func wakeOrStart(_ tier: Tier) -> Plan {
        defer { check(tier) }
        switch self[tier].word.claim(width: width) {
        case .claimed(let worker): return .wake(worker)
        case .busy: return .none // a producer claimed since the offer looked
        case .noneIdle: break
        }
        guard self[tier].threads < threadCap else {
            capReached = true
            return .none
        }
        if self[tier].threads >= width && !mayReplaceBlockedWorker(tier) { return .none }
        self[tier].threads += 1
        self[tier].word.add(searching: 1, running: 1)
        return .start
    }

    /// Whether a thread beyond the width (one replacing a blocked or stalled worker) may start
    /// now: at once below `crowdLimit` blocked workers, past it one per `crowdInterval`; and only
    /// if the OS leaves room (`roomForReplacement`). A refusal leaves `crowdWaiting` set: the
    /// monitor offers the tier again at `nextCrowdStart`.
    private mutating func mayReplaceBlockedWorker(_ tier: Tier) -> Bool {
        let crowd = self[tier].blocked + self[tier].stalled
        let now = crowd >= crowdLimit || self[tier].crowdWaiting ? runQueues.clock() : 0
        if crowd >= crowdLimit && now < self[tier].nextCrowdStart {
            self[tier].crowdWaiting = true
            return false
        }
        let at = now == 0 ? runQueues.clock() : now
        guard takePidsRoom(at) else {
            pidsReserveReached = true
            self[tier].crowdWaiting = true
            self[tier].nextCrowdStart = at &+ Self.crowdInterval
            return false
        }
        self[tier].crowdWaiting = false
        if crowd >= crowdLimit { self[tier].nextCrowdStart = at &+ Self.crowdInterval }
        return true
    }

    /// Takes one thread of the OS's room, reading it afresh when the last reading is
    /// `crowdInterval` old (so a refused replacement, offered again after that interval, sees
    /// threads that ended meanwhile). Between readings each start counts against the last one.
    private mutating func takePidsRoom(_ now: UInt64) -> Bool {
        if pidsReadAt == 0 || now &- pidsReadAt >= Self.crowdInterval {
            pidsRoom = roomForReplacement()
            pidsReadAt = now
        }
        guard pidsRoom > 0 else { return false }
        pidsRoom -= 1
        return true
    }

    /// Whether the monitor should offer `tier` again now: a replacement was refused and its time
    /// has come. Clears the wait (the offer sets it again if it is refused again).
    mutating func crowdStartDue(_ tier: Tier, now: UInt64) -> Bool {
        guard self[tier].crowdWaiting, now >= self[tier].nextCrowdStart else { return false }
        self[tier].crowdWaiting = false
        return true
    }

    /// Background work waits behind normal work: a background worker must look when it ages.
    /// With no background thread, one is started (it parks until the aging instant); an idle one
    /// that sleeps past that instant is woken so it parks again with the new one.
    private mutating func offerAgingBackground() -> Plan {
        let aging = runQueues.backgroundAgingDeadline()
        if self[.background].threads == 0 { return wakeOrStart(.background) }
        if let worker = self[.background].word.top, let aging,
            worker.idleDeadline == 0 || worker.idleDeadline > aging
        {
            return wakeOrStart(.background)
        }
        return .none
    }

    // MARK: A worker's visit: pop, steal, start, park

    /// The first half of a visit by an idle-handed worker of `tier` (its local queue is empty).
    mutating func pop(_ tier: Tier) -> Next {
        // Over width (a blocked worker came back): this one goes idle.
        guard self[tier].word.counts.running <= width else { return .idle }
        let job: (DispatchEntry, Int)?
        if tier == .background {
            job = runQueues.popBackground().map { ($0, RunQueues.background) }
        } else {
            job = runQueues.popNormal()
        }
        if let (entry, level) = job {
            // Batch only while the level is alone: under competition every job is one pick, so
            // aging counts the jobs that really started.
            let alone = runQueues.nonEmpty == UInt8(1) << level
            let batch = alone ? Self.batchSize(backlog: runQueues.count(level), width: width) : 0
            return .job(entry, level: level, batch: batch)
        }
        // A background thief only while no normal work waits: the background admission rule.
        if !runQueues.hasWork(background: tier.isBackground)
            && (tier == .normal || !runQueues.hasWork(background: false))
        {
            return .steal
        }
        return .idle
    }

    /// Hands the batch `pop` granted (at most `max` jobs of `level`), oldest first, to `take`: the
    /// worker's local queue. `batchCount` says beforehand how many (for `LocalQueue.beginBatch`).
    mutating func takeBatch(level: Int, max: Int, into take: (consuming DispatchEntry) -> Void) {
        runQueues.popMore(level, max: max, into: take)
    }

    /// How many jobs `takeBatch(level:max:into:)` will hand over.
    func batchCount(level: Int, max: Int) -> Int { Swift.min(max, runQueues.count(level)) }

    /// The worker found a job (popped or stolen). A searcher stops searching and, since more work
    /// may wait, the next searcher is planned (the chain). A normal worker also lets waiting
    /// background work start when no normal work is left or enough normal jobs started for it to
    /// age. Returns the plans for (its own tier, the background tier).
    mutating func started(_ tier: Tier, wasSearching: inout Bool) -> (own: Plan, background: Plan) {
        var own = Plan.none
        var background = Plan.none
        if wasSearching {
            wasSearching = false
            // One read-modify-write (the searcher's half of the Dekker pair with a producer that
            // raised the stage's flag and then loads the word).
            self[tier].word.add(searching: -1)
            own = offer(tier)
        }
        if tier == .normal && runQueues.hasWork(background: true)
            && (!runQueues.hasWork(background: false) || runQueues.backgroundPassesComplete)
        {
            background = offer(.background)
        }
        check(tier)
        return (own, background)
    }

    /// The worker found nothing: it goes on its tier's idle stack (`IdleWord.park`: pushed, and
    /// out of running and searching into idle in one read-modify-write), until `idleDeadline` for
    /// a background worker waiting on aged work. The caller has reset the worker's event: a
    /// producer may claim it and set the event as soon as it is pushed. A normal worker leaving
    /// lets waiting background work start. Returns the background tier's plan.
    mutating func park(_ worker: Worker, wasSearching: inout Bool) -> Plan {
        let tier = Tier(background: worker.background)
        worker.idleDeadline = tier == .background ? runQueues.backgroundAgingDeadline() ?? 0 : 0
        self[tier].word.park(worker, wasSearching: wasSearching)
        wasSearching = false
        check(tier)
        if tier == .normal && runQueues.hasWork(background: true) { return offer(.background) }
        return .none
    }

    /// What an idle worker whose sleep ended without a wake does. `.woken`: a waker took it off the
    /// idle stack concurrently (its event is about to be set); `.work`: aged background work may run
    /// (it took itself off, counted running, not searching); `.sleep(until)`: sleep on until that
    /// stamp; `.retire`: removed, its thread ends.
    enum IdleVerdict: Equatable { case woken, work, sleep(until: UInt64), retire }

    /// Decided under the idle stack's lock: a producer may claim the worker concurrently.
    mutating func idleTimedOut(_ worker: Worker, idleSince: UInt64) -> IdleVerdict {
        let tier = Tier(background: worker.background)
        let word = self[tier].word
        word.lock.lock()
        guard worker.isIdle else {
            word.lock.unlock()
            return .woken
        }
        if tier == .background && runQueues.backgroundAdmissible() && word.counts.running < width {
            word.removeLocked(worker, running: 1)
            word.lock.unlock()
            check(tier)
            return .work
        }
        let retireAt = idleSince &+ idleTimeout
        let now = runQueues.clock()
        if now >= retireAt {
            word.removeLocked(worker)
            word.lock.unlock()
            self[tier].workers.removeAll { $0 === worker }
            self[tier].threads -= 1
            check(tier)
            return .retire
        }
        word.lock.unlock()
        // An aging instant already past (the tier is at width) is no reason to wake again.
        let aging = tier == .background ? runQueues.backgroundAgingDeadline().flatMap { $0 > now ? $0 : nil } : nil
        return .sleep(until: aging.map { min($0, retireAt) } ?? retireAt)
    }

    // MARK: Block, stall, start, retire

    /// A started thread joins its tier's list (it was counted when its start was planned).
    mutating func register(_ worker: Worker) {
        self[Tier(background: worker.background)].workers.append(worker)
    }

    /// The OS refused the thread planned by `.start` (`worker` had been registered, or nil).
    mutating func startFailed(_ tier: Tier, worker: Worker?) {
        if let worker { self[tier].workers.removeAll { $0 === worker } }
        self[tier].threads -= 1
        self[tier].word.add(searching: -1, running: -1)
        check(tier)
    }

    /// A worker is about to park inside a ThreadKit wait while running a job (`wasStalled`: the
    /// monitor counted it stalled already): another may take its place. The caller returns its
    /// local jobs to the run queues and offers the tier.
    mutating func block(_ tier: Tier, wasStalled: Bool) {
        if wasStalled { self[tier].stalled -= 1 } else { self[tier].word.add(running: -1) }
        self[tier].blocked += 1
        check(tier)
    }

    /// The worker resumed: running again (the tier may be over width until a worker reaches a
    /// job boundary and goes idle: `pop` returns `.idle` then).
    mutating func unblock(_ tier: Tier) {
        self[tier].blocked -= 1
        self[tier].word.add(running: 1)
        check(tier)
    }

    /// The monitor found a running worker blocked outside ThreadKit.
    mutating func stall(_ tier: Tier) {
        self[tier].word.add(running: -1)
        self[tier].stalled += 1
        check(tier)
    }

    /// A stalled worker is runnable again, or its job ended.
    mutating func unstall(_ tier: Tier) {
        self[tier].stalled -= 1
        self[tier].word.add(running: 1)
        check(tier)
    }

    /// Whether tier `t`'s run queues hold work it cannot admit now (the monitor's trigger). Inlined,
    /// like every non-mutating method the pool calls on a hot path (`DispatchPool.scheduler` says
    /// why: out of line, each call copied the whole scheduler to the stack first, on every offer,
    /// under the pool's lock).
    @inline(__always)
    func saturatedWithWork(_ tier: Tier) -> Bool {
        self[tier].word.counts.running >= width && runQueues.hasWork(background: tier.isBackground)
    }
}
