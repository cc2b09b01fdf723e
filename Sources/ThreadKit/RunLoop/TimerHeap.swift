// TimerHeap: the one timer heap design of ThreadKit: a binary min-heap keyed by
// (deadline, sequence), so timers due at the same instant fire in the order they were scheduled.
// Entries are never updated in place: rescheduling pushes a new entry and bumps the timer's
// generation, and stale entries (old generation, invalid timer, timer removed from the mode) are
// dropped when they reach the top. Owned by whoever guards it (a run loop's mode: the loop lock).

struct TimerHeap {
    struct Entry {
        let deadline: ContinuousClock.Instant
        let sequence: UInt64
        let timer: TKTimer
        let generation: UInt64

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : sequence < other.sequence
        }
    }

    private var entries: [Entry] = []
    private var nextSequence: UInt64 = 0

    var isEmpty: Bool { entries.isEmpty }

    mutating func push(_ timer: TKTimer, deadline: ContinuousClock.Instant, generation: UInt64) {
        entries.append(Entry(deadline: deadline, sequence: nextSequence, timer: timer, generation: generation))
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

    @discardableResult
    mutating func pop() -> Entry? {
        guard !entries.isEmpty else { return nil }
        entries.swapAt(0, entries.count - 1)
        let last = entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count && entries[left].precedes(entries[smallest]) { smallest = left }
            if right < entries.count && entries[right].precedes(entries[smallest]) { smallest = right }
            if smallest == parent { break }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
        return last
    }
}
