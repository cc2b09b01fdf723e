// RunQueues: the pool's FIFOs, one per QoS level, and the aging rule that picks the next job
// (docs/DispatchPool.md, "QoS: order, aging, OS priority"). Part of the PoolScheduler value, guarded
// by the pool's lock. Time comes from `clock` (the real one in the pool, a hand-moved one in the
// scheduler's deterministic tests), read only when levels compete and when a level holding a
// burst's buffer empties (`settleEmptied`: its rings give such buffers back once quiet, JobRing.settle).
// It owns its rings and its two per-level arrays, freed in its deinit (~Copyable: one owner).
import Glibc

/// Levels are numbered by importance: 0 background (served by the background tier only),
/// 1 utility, 2 default, 3 userInitiated, 4 userInteractive.
struct RunQueues: ~Copyable {
    static let levelCount = 5
    static let background = 0
    /// Aging (a bounded share): a waiting level L is served ahead of more important levels of its
    /// tier once `agingStarts[L]` jobs of those levels have started since L was last served (or
    /// began to wait) and it has waited `agingTime[L]` nanoseconds (40, 20, 10, 5 ms). Both double
    /// at each step down, so a more
    /// important level always gets the larger share however long the jobs are (docs/DispatchPool.md
    /// has the starvation-freedom argument). userInteractive never ages: nothing is above it.
    static let agingStarts: [Int] = [32, 16, 8, 4, 0]
    static let agingTime: [UInt64] = [40_000_000, 20_000_000, 10_000_000, 5_000_000, 0]

    static func level(_ qos: TKQualityOfService) -> Int {
        switch qos {
        case .background: 0
        case .utility: 1
        case .default, .unspecified: 2
        case .userInitiated: 3
        case .userInteractive: 4
        }
    }

    /// The levels of each tier, as bits of `nonEmpty`.
    static let normalMask: UInt8 = 0b11110
    static let backgroundMask: UInt8 = 1 << background

    /// One ring per level.
    private let rings = LevelRings(capacity: 64)
    /// Nanoseconds on a monotonic clock, never 0: `stamp` in the pool.
    let clock: () -> UInt64

    init(clock: @escaping () -> UInt64 = RunQueues.stamp) {
        self.clock = clock
    }

    deinit {
        waitingSince.deallocate()
        passes.deallocate()
    }

    /// Runs `body` with level `level`'s ring, without retaining it.
    @inline(__always)
    private func withRing<R>(_ level: Int, _ body: (JobRing<DispatchEntry>) -> R) -> R {
        rings.withRing(level, body)
    }
    /// Bit L set while level L is non-empty.
    private(set) var nonEmpty: UInt8 = 0
    /// Since when level L has waited with other levels non-empty (its aging clock, a `stamp()`); 0
    /// while it has not competed yet or was just served. Stamped lazily, so a level alone never
    /// reads the clock.
    // safety: this value's own memory (allocated here, freed in deinit, ~Copyable so never
    // aliased by a copy); indexed only by levels below `levelCount`, under the owner's lock.
    private let waitingSince: UnsafeMutablePointer<UInt64> = {
        let stamps = UnsafeMutablePointer<UInt64>.allocate(capacity: RunQueues.levelCount)
        stamps.initialize(repeating: 0, count: RunQueues.levelCount)
        return stamps
    }()
    /// Jobs of more important levels started while level L waited, since it was last served or
    /// became non-empty; saturates at `agingStarts[L]` (which keeps the bound in the docs' argument).
    // safety: as for `waitingSince`: owned by this value, freed in deinit, indexed by level.
    private let passes: UnsafeMutablePointer<Int> = {
        let passes = UnsafeMutablePointer<Int>.allocate(capacity: RunQueues.levelCount)
        passes.initialize(repeating: 0, count: RunQueues.levelCount)
        return passes
    }()

    /// An aging stamp: ContinuousClock's clock (CLOCK_BOOTTIME) in nanoseconds, never 0. Not a
    /// `ContinuousClock.Instant`: that type is resilient, and a function holding one in a local
    /// paid a metadata lookup and a dynamic stack allocation on every call — `push` included.
    static func stamp() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return max(1, UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec))
    }

    var isEmpty: Bool { nonEmpty == 0 }

    func count(_ level: Int) -> Int { withRing(level) { $0.count } }

    /// Jobs waiting per level, background first (TKPoolIntrospection).
    var stateDescription: String {
        (0..<RunQueues.levelCount).map { "level \($0): \(count($0))" }.joined(separator: ", ")
    }

    var totalCount: Int { (0..<RunQueues.levelCount).reduce(0) { $0 + count($1) } }

    /// Whether jobs for the normal tier (levels 1–4) or the background tier (level 0) wait.
    func hasWork(background: Bool) -> Bool {
        background ? nonEmpty & 1 != 0 : nonEmpty & RunQueues.normalMask != 0
    }

    mutating func push(_ entry: consuming DispatchEntry, level: Int) {
        markNonEmpty(level)
        // The slot is reserved under a guaranteed reference, then the entry is moved into it.
        // safety: the slot was just reserved (uninitialized, counted) and nothing else can touch
        // the ring before this initialize: the caller holds the owner's lock.
        withRing(level) { $0.reserveLast() }.initialize(to: entry)
    }

    /// Moves every entry of `batch`, in order, to the back of `level`, leaving `batch` empty: a
    /// swap of buffers when the level is empty, bulk moves otherwise (`JobRing.append(contentsOf:)`),
    /// so the stage's drain does not move a shard's jobs one by one.
    mutating func append(contentsOf batch: JobRing<DispatchEntry>, level: Int) {
        guard !batch.isEmpty else { return }
        markNonEmpty(level)
        withRing(level) { $0.append(contentsOf: batch) }
    }

    /// Level `level` is about to receive jobs: if it was empty, it now competes from the start (its
    /// clock starts now if another level waits, with no passes yet).
    @inline(__always)
    private mutating func markNonEmpty(_ level: Int) {
        let bit = UInt8(1) << level
        guard nonEmpty & bit == 0 else { return }
        nonEmpty |= bit
        waitingSince[level] = nonEmpty != bit ? clock() : 0
        passes[level] = 0
    }

    /// Hands up to `max` more entries of `level` (after one was popped), oldest first, to `take`
    /// (a worker's local queue: no copy in between).
    mutating func popMore(_ level: Int, max: Int, into take: (consuming DispatchEntry) -> Void) {
        var n = 0
        let emptied = withRing(level) { ring -> Bool in
            while n < max, let entry = ring.popFirst() {
                take(entry)
                n += 1
            }
            guard ring.isEmpty else { return false }
            settleEmptied(ring)
            return true
        }
        if emptied { nonEmpty &= ~(UInt8(1) << level) }
        countPasses(below: level, jobs: n)
    }

    /// Puts a worker's unstarted local jobs back in `level`, in order: at the front (the worker
    /// blocked, stalled, or another level waits), or at the back (jobs of this level waited behind
    /// its local ones). The local jobs move into the level's buffer (at most `localLimit` and a
    /// few), never the other way: a local queue must not leave with a level's burst-sized buffer,
    /// which it would keep for good.
    mutating func giveBack(_ batch: JobRing<DispatchEntry>, level: Int, atFront: Bool) {
        guard !batch.isEmpty else { return }
        markNonEmpty(level)
        withRing(level) { ring in
            if atFront {
                ring.prepend(contentsOf: batch, keepingBuffers: true)
            } else {
                ring.append(contentsOf: batch, keepingBuffers: true)
            }
        }
    }

    /// Gives back the buffers of levels that held a burst and have been quiet since
    /// (`JobRing.settle`): the pool's look once a worker has idled for its timeout. `now`: `clock`.
    func settleRings(now: UInt64) {
        for level in 0..<RunQueues.levelCount { withRing(level) { _ = $0.settle(now: now) } }
    }

    /// A level just emptied: if its buffer is a burst's, `JobRing.settle` notes whether it was
    /// needed (or frees it, after a quiet second). One clock read, only for such a buffer.
    @inline(__always)
    private func settleEmptied(_ ring: JobRing<DispatchEntry>) {
        if ring.isOversized { ring.settle(now: clock()) }
    }

    /// The next job for a normal worker: the highest non-empty level, unless a lower one has aged
    /// (then the highest aged one).
    mutating func popNormal() -> (DispatchEntry, Int)? {
        let mask = nonEmpty & RunQueues.normalMask
        guard mask != 0 else { return nil }
        var level = 7 - mask.leadingZeroBitCount
        if mask & ~(UInt8(1) << level) != 0 {
            let now = clock()
            stampCompetitors(now)
            var lower = level - 1
            while lower >= 1 {
                if mask & (1 << lower) != 0 && hasAged(lower, now: now) {
                    level = lower
                    break
                }
                lower -= 1
            }
        }
        let entry = pop(level)
        countPasses(below: level, jobs: 1)
        return (entry, level)
    }

    /// The next background job, if the background tier may run now: no normal level waits, or the
    /// background level has aged.
    mutating func popBackground() -> DispatchEntry? {
        guard nonEmpty & 1 != 0 else { return nil }
        if nonEmpty & RunQueues.normalMask != 0 {
            let t = clock()
            stampCompetitors(t)
            guard hasAged(0, now: t) else { return nil }
        }
        return pop(0)
    }

    /// Whether a background job may start now (the same rule as `popBackground`, without popping).
    mutating func backgroundAdmissible() -> Bool {
        guard nonEmpty & 1 != 0 else { return false }
        if nonEmpty & RunQueues.normalMask == 0 { return true }
        let now = clock()
        stampCompetitors(now)
        return hasAged(0, now: now)
    }

    /// Whether waiting background work has seen enough normal jobs start to age (its time
    /// condition may still be pending): a normal worker then offers it to the background tier.
    var backgroundPassesComplete: Bool {
        nonEmpty & 1 != 0 && passes[0] >= RunQueues.agingStarts[0]
    }

    /// When waiting background work ages by time (a `clock` stamp), once its pass count is
    /// complete (nil: none waits, its count is not complete — the normal pop that completes it
    /// offers the work — or it may run already).
    func backgroundAgingDeadline() -> UInt64? {
        guard nonEmpty & 1 != 0, nonEmpty & RunQueues.normalMask != 0, waitingSince[0] != 0,
            passes[0] >= RunQueues.agingStarts[0]
        else { return nil }
        return waitingSince[0] + RunQueues.agingTime[0]
    }

    private func hasAged(_ level: Int, now: UInt64) -> Bool {
        guard passes[level] >= RunQueues.agingStarts[level], waitingSince[level] != 0 else { return false }
        return now &- waitingSince[level] >= RunQueues.agingTime[level]
    }

    /// `jobs` jobs of `level` started: every waiting level below it was passed over that often.
    private mutating func countPasses(below level: Int, jobs: Int) {
        var lower = nonEmpty & ((UInt8(1) << level) &- 1)
        while lower != 0 {
            let l = lower.trailingZeroBitCount
            passes[l] = min(passes[l] + jobs, RunQueues.agingStarts[l])
            lower &= lower &- 1
        }
    }

    private mutating func stampCompetitors(_ now: UInt64) {
        for level in 0..<RunQueues.levelCount where nonEmpty & (1 << level) != 0 && waitingSince[level] == 0 {
            waitingSince[level] = now
        }
    }

    private mutating func pop(_ level: Int) -> DispatchEntry {
        let (entry, emptied) = withRing(level) { ring in
            let entry = ring.popFirst()!
            guard ring.isEmpty else { return (entry, false) }
            settleEmptied(ring)
            return (entry, true)
        }
        if emptied { nonEmpty &= ~(UInt8(1) << level) }
        // Just served: its clock restarts at the next competition, its passes now.
        waitingSince[level] = 0
        passes[level] = 0
        return entry
    }
}
