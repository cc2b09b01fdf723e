// DeadlineHeap: the one timer heap design of ThreadKit, for run-loop timers (one heap per mode,
// RunLoop/TimerHeap.swift) and for the dispatch manager (asyncAfter and timer sources): a binary
// min-heap keyed by (deadline, sequence), so entries due at the same instant fire in the order
// they were scheduled. Entries are never updated in place: a rescheduled timer pushes a new entry
// with a new generation, and stale ones are dropped when they reach the top (`top(where:)`) or
// skipped when they fire; `removeAll(where:)` drops a removed item's entries at once. Guarded by its owner's lock (a run loop's, the manager's).

struct DeadlineHeap<Payload> {
    /// A deadline as a plain integer: its exact distance from `DeadlineKey.epoch` in attoseconds.
    /// `ContinuousClock.Instant` is a resilient type of the Concurrency library, so an entry
    /// holding one was copied and compared through value witnesses and calls at every step of a
    /// sift (a fifth of a 25,000-timer flood's time, perf); keys compare inline.
    struct Entry {
        let key: DeadlineKey
        let sequence: UInt64
        let payload: Payload

        /// The exact deadline the entry was pushed with.
        var deadline: ContinuousClock.Instant { key.instant }

        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            key != other.key ? key < other.key : sequence < other.sequence
        }
    }

    private var entries: [Entry] = []
    private var nextSequence: UInt64 = 0

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }
    var earliest: ContinuousClock.Instant? { entries.first?.deadline }

    mutating func push(_ payload: Payload, deadline: ContinuousClock.Instant) {
        entries.append(Entry(key: DeadlineKey(deadline), sequence: nextSequence, payload: payload))
        nextSequence &+= 1
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].precedes(entries[parent]) else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// The earliest entry that `isLive` accepts; dead entries above it are discarded.
    mutating func top(where isLive: (Entry) -> Bool) -> Entry? {
        while let first = entries.first {
            if isLive(first) { return first }
            pop()
        }
        return nil
    }

    /// Removes and returns the entries due at `now` (deadline <= now), earliest first.
    mutating func popDue(_ now: ContinuousClock.Instant) -> [Entry] {
        var due: [Entry] = []
        let limit = DeadlineKey(now)
        while let first = entries.first, first.key <= limit { due.append(pop()) }
        return due
    }

    @discardableResult
    mutating func pop() -> Entry {
        entries.swapAt(0, entries.count - 1)
        let last = entries.removeLast()
        siftDown(from: 0)
        return last
    }

    /// Drops every entry `matches` accepts at once (not when it reaches the top), so that what the
    /// payloads hold is released now: O(n), for removals (an invalidated timer), not for firing.
    mutating func removeAll(where matches: (Entry) -> Bool) {
        let before = entries.count
        entries.removeAll(where: matches)
        guard entries.count != before else { return }
        for parent in stride(from: entries.count / 2 - 1, through: 0, by: -1) { siftDown(from: parent) }
    }

    private mutating func siftDown(from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count && entries[left].precedes(entries[smallest]) { smallest = left }
            if right < entries.count && entries[right].precedes(entries[smallest]) { smallest = right }
            if smallest == parent { break }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// An instant as its exact offset from a fixed epoch, in attoseconds (Duration's own
/// representation, an Int128): two keys compare inline in the order of their instants, and the
/// conversion is exact both ways for every instant the clock can hold (far past and far future
/// included: Duration's seconds-and-attoseconds components would not fit an Int64 there).
struct DeadlineKey: Comparable {
    /// Any fixed instant will do; read once.
    static let epoch = ContinuousClock.now

    let attoseconds: Int128

    init(_ instant: ContinuousClock.Instant) {
        attoseconds = (instant - DeadlineKey.epoch).attoseconds
    }

    var instant: ContinuousClock.Instant {
        DeadlineKey.epoch + Duration(attoseconds: attoseconds)
    }

    @inline(__always)
    static func < (a: DeadlineKey, b: DeadlineKey) -> Bool { a.attoseconds < b.attoseconds }
}
