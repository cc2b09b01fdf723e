import XCTest

// PoolScheduler, the dispatch pool's scheduling core, driven without threads: fake workers, a
// hand-moved clock, and the transitions the pool makes (submit, offer, pop, steal, started, park,
// block, unblock, stall, unstall, start failed, idle timeout, retire). Every test ends by checking
// the counter invariant (threads = running + blocked + stalled + idle) with its own arithmetic,
// not the scheduler's `invariantHolds`. Deterministic: no thread, no sleep, no real clock.
@testable import ThreadKit

final class PoolSchedulerTests: XCTestCase {
    final class FakeWorker: PoolSchedulerWorker {
        let background: Bool
        var isIdle = false
        var idleDeadline: UInt64 = 0
        var nextIdle: FakeWorker?
        let name: String
        init(_ name: String, background: Bool = false) {
            self.name = name
            self.background = background
        }
    }

    typealias Scheduler = PoolScheduler<FakeWorker>

    /// A clock the test moves by hand (nanoseconds, never 0).
    final class ManualClock {
        var now: UInt64 = 1_000_000_000
        func advance(milliseconds: UInt64) { now += milliseconds * 1_000_000 }
    }

    /// A scheduler of `width`, with `parked` started and parked in order (`startAndPark`).
    private func makeScheduler(
        width: Int = 2, cap: Int = 255, clock: ManualClock = ManualClock(), parked: [FakeWorker] = []
    ) -> Scheduler {
        var s = Scheduler(width: width, threadCap: cap, idleTimeout: 2_000_000_000, clock: { clock.now })
        for worker in parked { startAndPark(&s, worker) }
        return s
    }

    private func job() -> DispatchEntry { DispatchEntry(.block({})) }

    /// Puts `worker` on its tier's idle stack the way the pool does: planned (.start), then its
    /// first visit finds nothing.
    private func startAndPark(_ s: inout Scheduler, _ worker: FakeWorker) {
        let tier = Scheduler.Tier(background: worker.background)
        s[tier].threads += 1 // a thread that exists: as if its start had been planned and run
        s[tier].running += 1
        s.register(worker)
        var searching = false
        _ = s.park(worker, wasSearching: &searching)
    }

    private func assertCounters(_ s: borrowing Scheduler, _ tier: Scheduler.Tier, file: StaticString = #filePath, line: UInt = #line) {
        let t = s[tier]
        XCTAssertEqual(t.threads, t.running + t.blocked + t.stalled + t.idleCount, "threads", file: file, line: line)
        XCTAssertGreaterThanOrEqual(t.searching, 0, file: file, line: line)
        XCTAssertLessThanOrEqual(t.searching, t.running, file: file, line: line)
    }

    private func isWake(_ plan: Scheduler.Plan, _ worker: FakeWorker? = nil) -> Bool {
        if case .wake(let w) = plan { return worker.map { $0 === w } ?? true }
        return false
    }

    private func isStart(_ plan: Scheduler.Plan) -> Bool {
        if case .start = plan { return true }
        return false
    }

    // MARK: The wedge of 2026-11-25

    /// A searching normal worker that takes the job completing waiting background work's passes
    /// gets two plans in one locked section: the next normal searcher (the chain) and a background
    /// worker (to park until the work ages). The pool must carry out both; with one slot for both
    /// (the old `Actions`) the normal one was dropped while counted searching, and the normal tier
    /// never woke anyone again (docs/DispatchPool.md, "The wedge of 2026-11-25").
    func testASearcherThatStartsAJobCanPlanOneWorkerPerTierAndThePoolKeepsBoth() {
        var s = makeScheduler(width: 3)
        let n1 = FakeWorker("n1")
        let n2 = FakeWorker("n2")
        let n3 = FakeWorker("n3")
        let b1 = FakeWorker("b1", background: true)
        for w in [n1, n2, n3, b1] { startAndPark(&s, w) }
        s.submit(job(), level: RunQueues.background)
        for _ in 0..<100 { s.submit(job(), level: 2) }
        XCTAssertTrue(isWake(s.offer(.normal), n3))
        // n3 finds a job and chains n2; then it takes 30 more (background passes: 31 of 32).
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        var searching = true
        var plans = s.started(.normal, wasSearching: &searching)
        XCTAssertTrue(isWake(plans.own, n2))
        XCTAssertTrue(plans.background.isNone)
        for _ in 0..<30 {
            guard case .job = s.pop(.normal) else { return XCTFail("no job") }
            var notSearching = false
            plans = s.started(.normal, wasSearching: &notSearching)
            XCTAssertTrue(plans.own.isNone && plans.background.isNone)
        }
        // n2, the searcher, takes the 32nd: it chains n1 AND lets a background worker look.
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        searching = true
        plans = s.started(.normal, wasSearching: &searching)
        XCTAssertTrue(isWake(plans.own, n1))
        XCTAssertTrue(isWake(plans.background, b1))
        XCTAssertEqual(s[.normal].searching, 1)
        XCTAssertEqual(s[.background].searching, 1)
        // Both plans of the section land in one Actions without overwriting each other.
        var actions = DispatchPool.Actions()
        actions.add(.start, .normal) // a stand-in for n1's wake (a FakeWorker is no PoolWorker)
        actions.add(.start, .background)
        XCTAssertTrue(actions.plansWorker(.normal))
        XCTAssertTrue(actions.plansWorker(.background))
        assertCounters(s, .normal)
        assertCounters(s, .background)
    }

    /// The wedge's signature: a tier whose searcher never arrives wakes nobody, however much is
    /// submitted. The scheduler's guard is what makes the lost wake fatal; the pool's per-tier
    /// plans are what keep it from happening.
    func testWhileATierHasASearcherOffersWakeNobody() {
        let workers = (0..<4).map { FakeWorker("w\($0)") }
        var s = makeScheduler(width: 4, parked: workers)
        s.submit(job(), level: 2)
        XCTAssertTrue(isWake(s.offer(.normal)))
        for _ in 0..<100 {
            s.submit(job(), level: 2)
            XCTAssertTrue(s.offer(.normal).isNone, "a second worker woken while one searches")
        }
        XCTAssertEqual(s[.normal].idleCount, 3)
        XCTAssertEqual(s[.normal].searching, 1)
        assertCounters(s, .normal)
    }

    // MARK: Wake decision: one wake per idle→busy step, the chain, admission

    /// The producer's side of the wake decision (`submitterTriesLock`), judged against the
    /// situations it exists for: the flag raised by a background flood must not keep an
    /// interactive job waiting for the background worker to drain it ("A raised flag is not a
    /// wake"), and a stream of jobs into a busy tier must never reach for the lock.
    func testAProducerTriesTheLockOnlyWhenItsJobsTierHasNobodyOnTheWay() {
        var monitorAsked = 0
        func tries(raised: Bool, searching: Int, running: Int, monitorAwake: Bool = true) -> Bool {
            Scheduler.submitterTriesLock(
                raisedPending: raised, searching: searching, running: running, width: 2,
                monitorAwake: {
                    monitorAsked += 1
                    return monitorAwake
                })
        }
        // Raised the flag: a wake is due unless a searcher is on its way or the tier is at width
        // with the monitor watching.
        XCTAssertTrue(tries(raised: true, searching: 0, running: 0))
        XCTAssertTrue(tries(raised: true, searching: 0, running: 1))
        XCTAssertFalse(tries(raised: true, searching: 1, running: 1))
        XCTAssertFalse(tries(raised: true, searching: 0, running: 2))
        XCTAssertTrue(tries(raised: true, searching: 0, running: 2, monitorAwake: false))
        // A searcher on its way drains the stage whether or not the monitor ticks: the producer
        // leaves the lock alone, and does not even ask about the monitor.
        monitorAsked = 0
        XCTAssertFalse(tries(raised: true, searching: 1, running: 1, monitorAwake: false))
        XCTAssertFalse(tries(raised: true, searching: 1, running: 2, monitorAwake: false))
        XCTAssertEqual(monitorAsked, 0)
        // The flag was up (raised for the other tier, say): only a tier with nobody running or
        // searching needs the lock; the monitor's state does not matter and is not read.
        monitorAsked = 0
        XCTAssertTrue(tries(raised: false, searching: 0, running: 0))
        XCTAssertTrue(tries(raised: false, searching: 0, running: 0, monitorAwake: false))
        XCTAssertFalse(tries(raised: false, searching: 0, running: 1))
        XCTAssertFalse(tries(raised: false, searching: 1, running: 1))
        XCTAssertFalse(tries(raised: false, searching: 0, running: 2, monitorAwake: false))
        XCTAssertEqual(monitorAsked, 0)

        // The situation itself: a background worker drains the flood (running, not searching), no
        // normal worker runs. The interactive job finds the flag up and must wake a worker; the
        // offer the lock's holder then makes wakes the idle normal one.
        var s = makeScheduler(width: 1)
        let normal = FakeWorker("normal")
        let background = FakeWorker("background", background: true)
        startAndPark(&s, normal)
        s[.background].threads += 1
        s[.background].running += 1
        s.register(background)
        for _ in 0..<3 { s.submit(job(), level: RunQueues.background) }
        XCTAssertTrue(
            Scheduler.submitterTriesLock(
                raisedPending: false, searching: s[.normal].searching, running: s[.normal].running, width: 1,
                monitorAwake: { true }))
        s.submit(job(), level: RunQueues.level(.userInteractive))
        XCTAssertTrue(isWake(s.offer(.normal), normal))
        XCTAssertTrue(s.offer(.background).isNone) // at width: the running one goes on
        assertCounters(s, .normal)
        assertCounters(s, .background)
    }

    func testABurstWakesOneWorkerAndEachSearcherThatFindsAJobWakesTheNext() {
        let workers = (0..<3).map { FakeWorker("w\($0)") }
        var s = makeScheduler(width: 3, parked: workers)
        for _ in 0..<10 { s.submit(job(), level: 2) }
        var woken = 0
        var plan = s.offer(.normal)
        while isWake(plan) {
            woken += 1
            guard case .job = s.pop(.normal) else { return XCTFail("no job") }
            var searching = true
            plan = s.started(.normal, wasSearching: &searching).own
        }
        XCTAssertEqual(woken, 3, "the chain stops at the width")
        XCTAssertEqual(s[.normal].running, 3)
        XCTAssertEqual(s[.normal].searching, 0)
        XCTAssertTrue(s.offer(.normal).isNone, "at width: nobody more")
        XCTAssertTrue(s.saturatedWithWork(.normal), "the monitor's trigger")
        assertCounters(s, .normal)
    }

    func testWithNoIdleWorkerAThreadIsPlannedUpToTheCapAndTheCapIsReported() {
        var s = makeScheduler(width: 2, cap: 3)
        // Two workers block (they count as threads, not running): a third may start, not a fourth.
        for i in 0..<3 {
            s.submit(job(), level: 2)
            let plan = s.offer(.normal)
            XCTAssertTrue(isStart(plan), "start \(i)")
            let w = FakeWorker("w\(i)")
            s.register(w)
            guard case .job = s.pop(.normal) else { return XCTFail("no job") }
            var searching = true
            _ = s.started(.normal, wasSearching: &searching)
            s.block(.normal, wasStalled: false)
        }
        XCTAssertEqual(s[.normal].threads, 3)
        XCTAssertFalse(s.capReached)
        s.submit(job(), level: 2)
        XCTAssertTrue(s.offer(.normal).isNone)
        XCTAssertTrue(s.capReached, "the cap is noticed for the pool's report")
        assertCounters(s, .normal)
    }

    func testAStartTheOSRefusesGivesBackTheThreadAndTheSearcher() {
        var s = makeScheduler()
        s.submit(job(), level: 2)
        XCTAssertTrue(isStart(s.offer(.normal)))
        let w = FakeWorker("w")
        s.register(w)
        s.startFailed(.normal, worker: w)
        XCTAssertEqual(s[.normal].threads, 0)
        XCTAssertEqual(s[.normal].searching, 0)
        XCTAssertTrue(s[.normal].workers.isEmpty)
        XCTAssertTrue(isStart(s.offer(.normal)), "the retry may plan a start again")
        assertCounters(s, .normal)
    }

    // MARK: Block, unblock, stall

    func testABlockedWorkerIsReplacedAtOnceAndTheTierMayRunOverWidthUntilAJobBoundary() {
        var s = makeScheduler(width: 1)
        let a = FakeWorker("a")
        let b = FakeWorker("b")
        startAndPark(&s, a)
        startAndPark(&s, b)
        s.submit(job(), level: 2)
        s.submit(job(), level: 2)
        XCTAssertTrue(isWake(s.offer(.normal), b))
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        var searching = true
        XCTAssertTrue(s.started(.normal, wasSearching: &searching).own.isNone, "at width")
        s.block(.normal, wasStalled: false)
        XCTAssertTrue(isWake(s.offer(.normal), a), "the blocked worker's place is taken")
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        searching = true
        _ = s.started(.normal, wasSearching: &searching)
        s.unblock(.normal)
        XCTAssertEqual(s[.normal].running, 2, "over width until a job boundary")
        s.submit(job(), level: 2)
        guard case .idle = s.pop(.normal) else { return XCTFail("an over-width tier must shed a worker") }
        searching = false
        _ = s.park(b, wasSearching: &searching)
        XCTAssertEqual(s[.normal].running, 1)
        assertCounters(s, .normal)
    }

    func testStalledWorkersAreNotCountedRunningUntilTheyResumeOrBlock() {
        let a = FakeWorker("a")
        var s = makeScheduler(width: 1, parked: [a])
        s.submit(job(), level: 2)
        XCTAssertTrue(isWake(s.offer(.normal), a))
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        var searching = true
        _ = s.started(.normal, wasSearching: &searching)
        s.submit(job(), level: 2)
        XCTAssertTrue(s.saturatedWithWork(.normal))
        s.stall(.normal)
        XCTAssertFalse(s.saturatedWithWork(.normal))
        XCTAssertTrue(isStart(s.offer(.normal)), "a stalled worker is compensated")
        s.block(.normal, wasStalled: true)
        XCTAssertEqual(s[.normal].stalled, 0)
        XCTAssertEqual(s[.normal].blocked, 1)
        s.unblock(.normal)
        assertCounters(s, .normal)
    }

    /// Starts one worker for a new job and blocks it inside the job (a replacement is planned as a
    /// start when no idle worker is left). Returns whether the start was planned.
    private func startAndBlock(_ s: inout Scheduler, _ name: String) -> Bool {
        s.submit(job(), level: 2)
        guard isStart(s.offer(.normal)) else { return false }
        s.register(FakeWorker(name))
        guard case .job = s.pop(.normal) else {
            XCTFail("no job for \(name)")
            return false
        }
        var searching = true
        _ = s.started(.normal, wasSearching: &searching)
        s.block(.normal, wasStalled: false)
        return true
    }

    /// Replacements for blocked workers come at once up to `crowdLimit` blocked workers; past it,
    /// one per `crowdInterval`, and a refused one leaves `crowdWaiting` for the monitor.
    func testPastTheCrowdLimitReplacementsArePacedToOnePerInterval() {
        let clock = ManualClock()
        var s = makeScheduler(width: 2, cap: 255, clock: clock)
        let limit = Scheduler.crowdLimit(width: 2)
        XCTAssertEqual(limit, 14)
        for i in 0..<limit { XCTAssertTrue(startAndBlock(&s, "w\(i)"), "replacement \(i) comes at once") }
        XCTAssertEqual(s[.normal].blocked, limit)
        // The crowd is full: one more now, then none until the interval has passed.
        XCTAssertTrue(startAndBlock(&s, "paced-1"), "the first past the limit")
        s.submit(job(), level: 2)
        XCTAssertTrue(s.offer(.normal).isNone, "a second at the same instant is paced")
        XCTAssertTrue(s[.normal].crowdWaiting, "the monitor must offer again")
        XCTAssertFalse(s.crowdStartDue(.normal, now: clock.now), "not due yet")
        clock.advance(milliseconds: Scheduler.crowdInterval / 1_000_000 - 1)
        XCTAssertFalse(s.crowdStartDue(.normal, now: clock.now), "never early")
        clock.advance(milliseconds: 1)
        XCTAssertTrue(s.crowdStartDue(.normal, now: clock.now))
        XCTAssertFalse(s[.normal].crowdWaiting)
        XCTAssertTrue(isStart(s.offer(.normal)), "due: one more")
        assertCounters(s, .normal)
        // Width 32 and up: the crowd is 248 (width + 248 threads come at once).
        XCTAssertEqual(Scheduler.crowdLimit(width: 16), 112)
        XCTAssertEqual(Scheduler.crowdLimit(width: 64), 248)
    }

    /// A replacement the OS has no room for (the pids cgroup's reserve) is refused, reported, and
    /// offered again by the monitor after an interval; the width's own threads never ask.
    func testAReplacementWithoutRoomInThePidsCgroupIsRefusedAndRetried() {
        let clock = ManualClock()
        let asked = Protected(0)
        let room = Protected(false)
        var s = Scheduler(
            width: 2, threadCap: 255, idleTimeout: 2_000_000_000, clock: { clock.now },
            roomForReplacement: {
                asked.withLock { $0 += 1 }
                return room.withLock { $0 } ? Int.max : 0
            })
        XCTAssertTrue(startAndBlock(&s, "a"))
        XCTAssertTrue(startAndBlock(&s, "b"))
        XCTAssertEqual(asked.withLock { $0 }, 0, "threads within the width do not ask")
        s.submit(job(), level: 2)
        XCTAssertTrue(s.offer(.normal).isNone, "no room: refused")
        XCTAssertEqual(asked.withLock { $0 }, 1)
        XCTAssertTrue(s.pidsReserveReached)
        XCTAssertTrue(s[.normal].crowdWaiting)
        room.withLock { $0 = true }
        XCTAssertFalse(s.crowdStartDue(.normal, now: clock.now), "retried after an interval, not at once")
        clock.advance(milliseconds: Scheduler.crowdInterval / 1_000_000)
        XCTAssertTrue(s.crowdStartDue(.normal, now: clock.now))
        XCTAssertTrue(isStart(s.offer(.normal)), "room again: the replacement starts")
        assertCounters(s, .normal)
    }

    /// The OS's room is read at most once per crowd interval (the reading is file reads under the
    /// pool's lock); between readings each replacement counts against it.
    func testThePidsRoomIsReadOncePerIntervalAndCountedDownBetween() {
        let clock = ManualClock()
        let asked = Protected(0)
        var s = Scheduler(
            width: 2, threadCap: 255, idleTimeout: 2_000_000_000, clock: { clock.now },
            roomForReplacement: {
                asked.withLock { $0 += 1 }
                return 2
            })
        XCTAssertTrue(startAndBlock(&s, "a"))
        XCTAssertTrue(startAndBlock(&s, "b"))
        XCTAssertTrue(startAndBlock(&s, "c"), "room 2: the first replacement")
        XCTAssertTrue(startAndBlock(&s, "d"), "room 1: the second")
        XCTAssertEqual(asked.withLock { $0 }, 1, "one reading for both")
        s.submit(job(), level: 2)
        XCTAssertTrue(s.offer(.normal).isNone, "the reading's room is used up")
        XCTAssertEqual(asked.withLock { $0 }, 1, "not read again within the interval")
        XCTAssertTrue(s.pidsReserveReached)
        clock.advance(milliseconds: Scheduler.crowdInterval / 1_000_000)
        XCTAssertTrue(s.crowdStartDue(.normal, now: clock.now))
        XCTAssertTrue(isStart(s.offer(.normal)), "read afresh after the interval")
        XCTAssertEqual(asked.withLock { $0 }, 2)
        assertCounters(s, .normal)
    }

    // MARK: Stealing

    func testWithEmptyRunQueuesAVisitAsksToStealAndABackgroundThiefWaitsForNormalWork() {
        var s = makeScheduler()
        guard case .steal = s.pop(.normal) else { return XCTFail("empty run queues: steal") }
        guard case .steal = s.pop(.background) else { return XCTFail("empty run queues: steal") }
        s.submit(job(), level: 3)
        guard case .idle = s.pop(.background) else {
            return XCTFail("a background worker must not steal while normal work waits")
        }
        XCTAssertTrue(isStart(s.offer(.normal, forStealing: true)))
    }

    // MARK: QoS order, batches and aging (by the hand-moved clock)

    func testHigherLevelsGoFirstAndALongLevelAloneIsTakenInBatches() {
        var s = makeScheduler(width: 1)
        s.submit(job(), level: 1)
        s.submit(job(), level: 4)
        s.submit(job(), level: 2)
        var order: [Int] = []
        while case .job(_, let level, let batch) = s.pop(.normal) {
            order.append(level)
            XCTAssertEqual(batch, 0, "no batch while other levels wait")
        }
        XCTAssertEqual(order, [4, 2, 1])
        for _ in 0..<40 { s.submit(job(), level: 2) }
        guard case .job(_, 2, let batch) = s.pop(.normal) else { return XCTFail("no job") }
        XCTAssertEqual(batch, 39, "width 1: the whole backlog")
        let local = JobRing<DispatchEntry>(capacity: DispatchPool.localCapacity)
        XCTAssertEqual(s.batchCount(level: 2, max: batch), batch)
        s.takeBatch(level: 2, max: batch) { local.append($0) }
        XCTAssertEqual(local.count, batch)
        XCTAssertEqual(s.runQueues.count(2), 39 - batch)
    }

    /// A visit takes the job it runs and an equal share of what is left for each worker (Go's
    /// globrunqget), at most half the local queue: a flood costs one lock visit per
    /// `batchLimit` jobs per worker, not one per eight.
    func testABatchIsTheVisitorsShareOfTheBacklogUpToHalfTheLocalQueue() {
        XCTAssertEqual(Scheduler.batchLimit, DispatchPool.localCapacity / 2)
        XCTAssertEqual(Scheduler.batchSize(backlog: 0, width: 4), 0)
        XCTAssertEqual(Scheduler.batchSize(backlog: 3, width: 4), 0, "fewer than one each: one job")
        XCTAssertEqual(Scheduler.batchSize(backlog: 40, width: 4), 10)
        XCTAssertEqual(Scheduler.batchSize(backlog: 100_000, width: 2), Scheduler.batchLimit - 1)
        var s = makeScheduler(width: 4)
        for _ in 0..<1_000 { s.submit(job(), level: 3) }
        var visits = 0
        var taken = 0
        while case .job(_, 3, let batch) = s.pop(.normal) {
            visits += 1
            let local = JobRing<DispatchEntry>(capacity: DispatchPool.localCapacity)
            let count = s.batchCount(level: 3, max: batch)
            s.takeBatch(level: 3, max: batch) { local.append($0) }
            XCTAssertEqual(local.count, count)
            taken += 1 + local.count
        }
        XCTAssertEqual(taken, 1_000)
        XCTAssertLessThanOrEqual(visits, 40, "1,000 jobs at width 4 in at most 40 visits")
    }

    func testALowerLevelAgesAfterItsPassesAndItsTimeAndNotBefore() {
        let clock = ManualClock()
        var s = makeScheduler(width: 1, clock: clock)
        s.submit(job(), level: 1) // utility: 16 passes and 20 ms
        for _ in 0..<100 { s.submit(job(), level: 4) }
        var levels: [Int] = []
        for _ in 0..<16 {
            guard case .job(_, let level, _) = s.pop(.normal) else { return XCTFail("no job") }
            levels.append(level)
        }
        XCTAssertEqual(Set(levels), [4], "utility does not age before 16 passes")
        guard case .job(_, 4, _) = s.pop(.normal) else { return XCTFail("utility aged before its time") }
        clock.advance(milliseconds: 19)
        guard case .job(_, 4, _) = s.pop(.normal) else { return XCTFail("utility aged early (19 ms)") }
        clock.advance(milliseconds: 1)
        guard case .job(_, 1, _) = s.pop(.normal) else { return XCTFail("utility did not age at 20 ms") }
    }

    func testBackgroundWorkBehindNormalWorkParksABackgroundWorkerUntilItAges() {
        let clock = ManualClock()
        var s = makeScheduler(width: 1, clock: clock)
        let n = FakeWorker("n")
        let b = FakeWorker("b", background: true)
        startAndPark(&s, n)
        startAndPark(&s, b)
        s.submit(job(), level: RunQueues.background)
        for _ in 0..<100 { s.submit(job(), level: 2) }
        XCTAssertTrue(s.offer(.background).isNone, "not admissible and not aged: no wake")
        XCTAssertTrue(isWake(s.offer(.normal), n))
        var searching = true
        var backgroundPlan = Scheduler.Plan.none
        for _ in 0..<32 {
            guard case .job(_, 2, _) = s.pop(.normal) else { return XCTFail("no normal job") }
            let plans = s.started(.normal, wasSearching: &searching)
            if !plans.background.isNone { backgroundPlan = plans.background }
        }
        // 32 passes complete: the idle background worker is woken to re-park until the aging time.
        XCTAssertTrue(isWake(backgroundPlan, b))
        guard case .idle = s.pop(.background) else { return XCTFail("background ran before its aging time") }
        searching = true
        _ = s.park(b, wasSearching: &searching)
        XCTAssertEqual(b.idleDeadline, clock.now + 40_000_000 - 0, "parks until 40 ms after it began to wait")
        XCTAssertEqual(s.idleTimedOut(b, idleSince: clock.now), .sleep(until: b.idleDeadline))
        clock.advance(milliseconds: 40)
        XCTAssertEqual(s.idleTimedOut(b, idleSince: clock.now), .work, "aged: it admits itself")
        guard case .job(_, RunQueues.background, _) = s.pop(.background) else { return XCTFail("no background job") }
        assertCounters(s, .normal)
        assertCounters(s, .background)
    }

    // MARK: Idle timeout and retirement

    func testAnIdleWorkerRetiresAfterTheIdleTimeoutAndAWokenOneDoesNot() {
        let clock = ManualClock()
        var s = makeScheduler(clock: clock)
        let a = FakeWorker("a")
        let b = FakeWorker("b")
        startAndPark(&s, a)
        startAndPark(&s, b)
        let since = clock.now
        clock.advance(milliseconds: 1_999)
        XCTAssertEqual(s.idleTimedOut(a, idleSince: since), .sleep(until: since + 2_000_000_000), "never early")
        s.submit(job(), level: 2)
        XCTAssertTrue(isWake(s.offer(.normal), b))
        clock.advance(milliseconds: 1)
        XCTAssertEqual(s.idleTimedOut(b, idleSince: since), .woken, "woken concurrently: it waits for its event")
        XCTAssertEqual(s.idleTimedOut(a, idleSince: since), .retire)
        XCTAssertEqual(s[.normal].threads, 1)
        XCTAssertEqual(s[.normal].workers.map(\.name), ["b"])
        assertCounters(s, .normal)
    }

    /// The idle stack (an intrusive list through the workers): the most recently idle worker is
    /// woken first, a worker retiring from the middle or the bottom is unlinked without
    /// disturbing the others' order, and a woken worker leaves no link behind.
    func testTheIdleStackWakesTheMostRecentlyIdleFirstAndUnlinksARetiringWorker() {
        let clock = ManualClock()
        var s = makeScheduler(width: 8, clock: clock)
        let workers = (0..<5).map { FakeWorker("w\($0)") }
        let since = clock.now
        for w in workers { startAndPark(&s, w) }
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w4", "w3", "w2", "w1", "w0"])
        clock.advance(milliseconds: 2_000)
        XCTAssertEqual(s.idleTimedOut(workers[2], idleSince: since), .retire, "from the middle")
        XCTAssertEqual(s.idleTimedOut(workers[0], idleSince: since), .retire, "from the bottom")
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w4", "w3", "w1"])
        XCTAssertEqual(s[.normal].idleCount, 3)
        XCTAssertNil(workers[2].nextIdle)
        XCTAssertNil(workers[0].nextIdle)
        assertCounters(s, .normal)
        s.submit(job(), level: 2)
        XCTAssertTrue(isWake(s.offer(.normal), workers[4]), "the most recently idle first")
        XCTAssertNil(workers[4].nextIdle)
        XCTAssertFalse(workers[4].isIdle)
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w3", "w1"])
        var searching = true
        _ = s.park(workers[4], wasSearching: &searching)
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w4", "w3", "w1"], "back on top")
        XCTAssertEqual(s.idleTimedOut(workers[4], idleSince: since), .retire, "from the top")
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w3", "w1"])
        XCTAssertEqual(s[.normal].idleCount, 2)
        assertCounters(s, .normal)
    }

    // MARK: The idle word (a producer's wake without the pool's lock)

    private func claimed(_ claim: IdleWord<FakeWorker>.Claim, _ worker: FakeWorker? = nil) -> Bool {
        if case .claimed(let w) = claim { return worker.map { $0 === w } ?? true }
        return false
    }

    /// The word's packing: three counters in one value, changed by one add of signed deltas that
    /// never spill into a neighbour.
    func testTheIdleWordPacksItsCountersAndAddsSignedDeltasWithoutSpilling() {
        let counts = IdleCounts(searching: 3, running: 4_096, idle: 65_535)
        XCTAssertEqual(IdleWord<FakeWorker>.unpack(IdleWord<FakeWorker>.pack(counts)), counts)
        let word = IdleWord<FakeWorker>()
        XCTAssertEqual(word.counts, IdleCounts(searching: 0, running: 0, idle: 0))
        XCTAssertEqual(word.add(searching: 1, running: 2, idle: 3), IdleCounts(searching: 1, running: 2, idle: 3))
        XCTAssertEqual(word.add(searching: -1, running: -2, idle: 1), IdleCounts(searching: 0, running: 0, idle: 4))
        XCTAssertEqual(word.add(running: 1, idle: -4), IdleCounts(searching: 0, running: 1, idle: 0))
        XCTAssertEqual(word.counts, IdleCounts(searching: 0, running: 1, idle: 0))
    }

    /// The claim's decision (`IdleCounts.mayClaim`, checked again under the stack's lock): only
    /// with nobody searching, fewer than `width` running and somebody idle; and its three answers.
    func testAClaimWakesOnlyWithNobodySearchingRoomToRunAndSomebodyIdle() {
        XCTAssertTrue(IdleCounts(searching: 0, running: 1, idle: 1).mayClaim(width: 2))
        XCTAssertFalse(IdleCounts(searching: 1, running: 1, idle: 1).mayClaim(width: 2), "a searcher is on its way")
        XCTAssertFalse(IdleCounts(searching: 0, running: 2, idle: 1).mayClaim(width: 2), "at width")
        XCTAssertFalse(IdleCounts(searching: 0, running: 1, idle: 0).mayClaim(width: 2), "nobody idle")

        var s = makeScheduler(width: 2)
        let workers = (0..<2).map { FakeWorker("w\($0)") }
        let word = s[.normal].word
        guard case .noneIdle = word.claim(width: 2) else { return XCTFail("nobody idle: a thread must start") }
        for w in workers { startAndPark(&s, w) }
        XCTAssertTrue(claimed(word.claim(width: 2), workers[1]), "the most recently idle first")
        XCTAssertFalse(workers[1].isIdle)
        XCTAssertNil(workers[1].nextIdle)
        XCTAssertEqual(word.counts, IdleCounts(searching: 1, running: 1, idle: 1))
        assertCounters(s, .normal)
        // One wake per idle→busy step: while the claimed worker searches, nobody else is claimed.
        guard case .busy = word.claim(width: 2) else { return XCTFail("a second worker claimed while one searches") }
        XCTAssertEqual(s[.normal].idleWorkers.map(\.name), ["w0"])
        // At width, nobody is claimed either.
        var searching = true
        s.submit(job(), level: 2)
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        _ = s.started(.normal, wasSearching: &searching)
        s[.normal].threads += 1 // a blocked worker came back: the tier is at width
        s[.normal].running += 1
        guard case .busy = word.claim(width: 2) else { return XCTFail("claimed at width") }
        XCTAssertEqual(s[.normal].idleCount, 1)
        assertCounters(s, .normal)
    }

    /// A producer never waits for the idle stack's lock: with it busy, its claim decides nothing
    /// and leaves the word and the stack as they were (it takes the pool's `tryLock` instead).
    func testAProducersClaimDecidesNothingWhileTheStacksLockIsBusy() {
        let w = FakeWorker("w")
        let s = makeScheduler(width: 2, parked: [w])
        let word = s[.normal].word
        word.lock.lock()
        XCTAssertNil(word.tryClaim(width: 2))
        word.lock.unlock()
        XCTAssertTrue(w.isIdle)
        XCTAssertEqual(word.counts, IdleCounts(searching: 0, running: 0, idle: 1))
        guard case .claimed(let claimed)? = word.tryClaim(width: 2) else { return XCTFail("the lock is free: a claim") }
        XCTAssertTrue(claimed === w)
        assertCounters(s, .normal)
    }

    /// What a producer does after staging (`submitterStep`): nothing while a worker is on its
    /// way; claim from the word when a worker is idle (normal tier only); the pool's lock when a
    /// thread must start, for the background tier, or for the monitor at width.
    func testAProducerClaimsAnIdleWorkerAndTakesTheLockOnlyToStartOneOrForTheBackgroundTier() {
        func step(
            raised: Bool = true, _ searching: Int, _ running: Int, _ idle: Int, lockFree: Bool = true,
            monitorAwake: Bool = true
        ) -> Scheduler.SubmitterStep {
            Scheduler.submitterStep(
                raisedPending: raised, counts: IdleCounts(searching: searching, running: running, idle: idle), width: 2,
                lockFree: lockFree, monitorAwake: { monitorAwake })
        }
        XCTAssertEqual(step(0, 0, 2), .claim)
        XCTAssertEqual(step(0, 1, 1), .claim)
        XCTAssertEqual(step(1, 1, 1), .done, "a searcher is on its way")
        XCTAssertEqual(step(0, 2, 0), .done, "at width, the monitor awake")
        XCTAssertEqual(step(0, 2, 0, monitorAwake: false), .tryLock, "at width, the monitor must look")
        XCTAssertEqual(step(0, 1, 0), .tryLock, "nobody idle: a thread must start")
        XCTAssertEqual(step(0, 0, 2, lockFree: false), .tryLock, "the background tier's offer applies admission")
        XCTAssertEqual(step(raised: false, 0, 0, 2), .claim, "the flag was up and nobody of the tier comes")
        XCTAssertEqual(step(raised: false, 0, 1, 1), .done, "the flag was up and a worker runs")
    }

    /// Asked again after its claim failed (`claimFailed`), a producer never claims twice: done
    /// while the claim that came first has its searcher on the way (or every worker runs and the
    /// monitor is awake), and the pool's lock otherwise, as when it raised the flag itself.
    func testAProducerWhoseClaimFailedIsDoneWhileASearcherComesAndTakesTheLockOtherwise() {
        func again(
            raised: Bool = true, _ searching: Int, _ running: Int, _ idle: Int, monitorAwake: Bool = true
        ) -> Scheduler.SubmitterStep {
            Scheduler.submitterStep(
                raisedPending: raised, counts: IdleCounts(searching: searching, running: running, idle: idle), width: 2,
                lockFree: true, claimFailed: true, monitorAwake: { monitorAwake })
        }
        XCTAssertEqual(again(1, 1, 1), .done, "another claim came first: its searcher is on its way")
        XCTAssertEqual(again(raised: false, 1, 1, 0), .done, "another claim came first")
        XCTAssertEqual(again(0, 1, 1), .tryLock, "a worker is idle, but no second claim")
        XCTAssertEqual(again(raised: false, 0, 1, 0), .tryLock, "the idle worker retired: the flag alone is not a wake")
        XCTAssertEqual(again(0, 2, 0), .done, "at width, the monitor awake")
        XCTAssertEqual(again(0, 2, 0, monitorAwake: false), .tryLock, "at width, the monitor must look")
    }

    /// A worker going idle: pushed and moved from running and searching to idle in one change of
    /// the word; a producer's claim then makes it the searcher, and the scheduler's own offer in
    /// the next locked section wakes nobody else.
    func testAParkCountsTheWorkerIdleAndAProducersClaimMakesItTheOneSearcher() {
        var s = makeScheduler(width: 2)
        let a = FakeWorker("a")
        let b = FakeWorker("b")
        startAndPark(&s, a)
        s[.normal].threads += 1
        s[.normal].running += 1
        s[.normal].searching += 1
        s.register(b)
        var searching = true
        _ = s.park(b, wasSearching: &searching)
        XCTAssertFalse(searching)
        XCTAssertTrue(b.isIdle)
        XCTAssertEqual(s[.normal].word.counts, IdleCounts(searching: 0, running: 0, idle: 2))
        assertCounters(s, .normal)
        // A producer claims (no pool lock in the pool; here the same calls, no thread).
        XCTAssertTrue(claimed(s[.normal].word.claim(width: 2), b))
        s.submit(job(), level: 2)
        XCTAssertTrue(s.offer(.normal).isNone, "the claimed worker searches: the offer wakes nobody")
        XCTAssertTrue(a.isIdle)
        assertCounters(s, .normal)
    }

    /// The chain on the word: a worker a producer claimed finds a job, stops searching, and
    /// claims the next idle worker only while work waits.
    func testAClaimedWorkerThatFindsAJobClaimsTheNextOnlyWhileWorkWaits() {
        let workers = (0..<3).map { FakeWorker("w\($0)") }
        var s = makeScheduler(width: 3, parked: workers)
        s.submit(job(), level: 2)
        s.submit(job(), level: 2)
        XCTAssertTrue(claimed(s[.normal].word.claim(width: 3), workers[2]))
        var searching = true
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        let plans = s.started(.normal, wasSearching: &searching)
        XCTAssertTrue(isWake(plans.own, workers[1]), "one job still waits: the next searcher")
        XCTAssertEqual(s[.normal].word.counts, IdleCounts(searching: 1, running: 2, idle: 1))
        searching = true
        guard case .job = s.pop(.normal) else { return XCTFail("no job") }
        XCTAssertTrue(s.started(.normal, wasSearching: &searching).own.isNone, "nothing waits: nobody woken")
        XCTAssertEqual(s[.normal].word.counts, IdleCounts(searching: 0, running: 2, idle: 1))
        assertCounters(s, .normal)
    }

    /// An idle worker whose sleep times out just as a producer claims it: the claim came first
    /// (under the stack's lock), so the worker is not retired but told it was woken.
    func testAnIdleWorkerClaimedAsItsSleepEndsIsWokenNotRetired() {
        let clock = ManualClock()
        var s = makeScheduler(width: 2, clock: clock)
        let w = FakeWorker("w")
        let since = clock.now
        startAndPark(&s, w)
        clock.advance(milliseconds: 2_000)
        XCTAssertTrue(claimed(s[.normal].word.claim(width: 2), w))
        XCTAssertEqual(s.idleTimedOut(w, idleSince: since), .woken)
        XCTAssertEqual(s[.normal].threads, 1)
        XCTAssertEqual(s[.normal].word.counts, IdleCounts(searching: 1, running: 1, idle: 0))
        assertCounters(s, .normal)
    }
}
