// RunQueues: the pool's FIFOs, one per QoS level, and the aging rule that picks the next job
// (docs/DispatchPool.md, "QoS: order, aging, OS priority"). Guarded by the pool's lock.

/// Levels are numbered by importance: 0 background (served by the background tier only),
/// 1 utility, 2 default, 3 userInitiated, 4 userInteractive.
struct RunQueues {
    static let levelCount = 5
    static let background = 0
    /// A lower non-empty level not served for this long is served next (once).
    static let agingLimit: Duration = .milliseconds(20)

    static func level(_ qos: TKQualityOfService) -> Int {
        switch qos {
        case .background: 0
        case .utility: 1
        case .default: 2
        case .userInitiated: 3
        case .userInteractive: 4
        }
    }

    static let normalMask: UInt8 = 0b11110

    private let levels: [JobRing<DispatchEntry>] = (0..<RunQueues.levelCount).map { _ in JobRing(capacity: 64) }
    /// Bit L set while level L is non-empty.
    private(set) var nonEmpty: UInt8 = 0
    /// Since when level L has waited with other levels non-empty (its aging clock); nil while it
    /// has not competed yet or was just served. Stamped lazily, so a level alone never reads the
    /// clock.
    private var waitingSince: [ContinuousClock.Instant?] = Array(repeating: nil, count: RunQueues.levelCount)

    var isEmpty: Bool { nonEmpty == 0 }

    func count(_ level: Int) -> Int { levels[level].count }

    /// Jobs waiting at every level.
    var totalCount: Int { levels.reduce(0) { $0 + $1.count } }

    /// Whether jobs for the normal tier (levels 1–4) or the background tier (level 0) wait.
    func hasWork(background: Bool) -> Bool {
        background ? nonEmpty & 1 != 0 : nonEmpty & RunQueues.normalMask != 0
    }

    mutating func push(_ entry: DispatchEntry, level: Int) {
        let bit = UInt8(1) << level
        if nonEmpty & bit == 0 {
            nonEmpty |= bit
            // Competing from the start: its clock starts now.
            waitingSince[level] = nonEmpty != bit ? ContinuousClock.now : nil
        }
        levels[level].append(entry)
    }

    /// Moves up to `max` more entries of `level` (after one was popped) into a worker's batch ring.
    mutating func popMore(_ level: Int, into batch: JobRing<DispatchEntry>, max: Int) {
        var n = 0
        while n < max, let entry = levels[level].popFirst() {
            batch.append(entry)
            n += 1
        }
        if levels[level].isEmpty { nonEmpty &= ~(UInt8(1) << level) }
    }

    /// Puts a worker's unstarted batch back at the front of `level`, in order.
    mutating func giveBack(_ batch: JobRing<DispatchEntry>, level: Int) {
        guard !batch.isEmpty else { return }
        levels[level].prepend(contentsOf: batch)
        nonEmpty |= UInt8(1) << level
    }

    /// The next job for a normal worker: the highest non-empty level, unless a lower one has aged.
    mutating func popNormal() -> (DispatchEntry, Int)? {
        let mask = nonEmpty & RunQueues.normalMask
        guard mask != 0 else { return nil }
        var level = 7 - mask.leadingZeroBitCount
        if mask & ~(UInt8(1) << level) != 0 {
            let now = ContinuousClock.now
            stampCompetitors(now)
            for lower in 1..<level where mask & (1 << lower) != 0 {
                if let since = waitingSince[lower], now - since >= RunQueues.agingLimit {
                    level = lower
                    break
                }
            }
        }
        return (pop(level), level)
    }

    /// The next background job, if the background tier may run now: no normal level waits, or the
    /// background level has aged.
    mutating func popBackground(now: () -> ContinuousClock.Instant) -> DispatchEntry? {
        guard nonEmpty & 1 != 0 else { return nil }
        if nonEmpty & RunQueues.normalMask != 0 {
            let t = now()
            stampCompetitors(t)
            guard let since = waitingSince[0], t - since >= RunQueues.agingLimit else { return nil }
        }
        return pop(0)
    }

    /// Whether a background job may start now (the same rule as `popBackground`, without popping).
    mutating func backgroundAdmissible() -> Bool {
        guard nonEmpty & 1 != 0 else { return false }
        if nonEmpty & RunQueues.normalMask == 0 { return true }
        let now = ContinuousClock.now
        stampCompetitors(now)
        guard let since = waitingSince[0] else { return false }
        return now - since >= RunQueues.agingLimit
    }

    /// When waiting background work ages (nil: none waits, or it may run already).
    func backgroundAgingDeadline() -> ContinuousClock.Instant? {
        guard nonEmpty & 1 != 0, nonEmpty & RunQueues.normalMask != 0, let since = waitingSince[0] else { return nil }
        return since + RunQueues.agingLimit
    }

    private mutating func stampCompetitors(_ now: ContinuousClock.Instant) {
        for level in 0..<RunQueues.levelCount where nonEmpty & (1 << level) != 0 && waitingSince[level] == nil {
            waitingSince[level] = now
        }
    }

    private mutating func pop(_ level: Int) -> DispatchEntry {
        let entry = levels[level].popFirst()!
        if levels[level].isEmpty { nonEmpty &= ~(UInt8(1) << level) }
        // Just served: its clock restarts at the next competition.
        waitingSince[level] = nil
        return entry
    }
}
