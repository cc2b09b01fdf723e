// ReadyQueue: a queue's operations that may start now, one FIFO per queue priority; `pop` takes
// the oldest operation of the highest non-empty priority. Not thread-safe: guarded by the owning
// TKOperationQueue's lock.

struct ReadyQueue {
    private static let levelCount = 5
    private let levels: [JobRing<TKOperation>] = (0..<ReadyQueue.levelCount).map { _ in JobRing(capacity: 16) }
    /// Bit L set while level L is non-empty.
    private var nonEmpty: UInt8 = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// veryLow (-8) … veryHigh (8) → 0 … 4.
    static func level(_ priority: TKOperation.QueuePriority) -> Int { (priority.rawValue + 8) / 4 }
    static let highest = levelCount - 1

    mutating func push(_ operation: TKOperation, level: Int) {
        levels[level].append(operation)
        nonEmpty |= 1 << level
        count += 1
    }

    /// The operation `pop` would return, left in place.
    var first: TKOperation? {
        guard nonEmpty != 0 else { return nil }
        return levels[7 - nonEmpty.leadingZeroBitCount].first
    }

    mutating func pop() -> TKOperation? {
        guard nonEmpty != 0 else { return nil }
        let level = 7 - nonEmpty.leadingZeroBitCount
        let operation = levels[level].popFirst()!
        if levels[level].isEmpty { nonEmpty &= ~(1 << level) }
        count -= 1
        return operation
    }
}
