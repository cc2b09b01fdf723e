// JobRing: the FIFO under every dispatch queue, pool run queue, operation ready queue and port
// inbox: a growable ring buffer whose elements are moved in and out (never copied).
// Not thread-safe: each ring is guarded by its owner's lock (a queue's ring by `queue.lock`, a
// level of the run queues by `pool.lock`, a port's inbox by its mutex) or belongs to one thread
// (a drainer's batch ring, a port's delivery batch). A class so a drainer can swap a queue's ring
// with its own in O(1) under the lock.

final class JobRing<Element>: @unchecked Sendable {
    // Guarded by the owner (see above): the runtime's dynamic exclusivity checks are off for the
    // fields, which every push and pop touches.
    @exclusivity(unchecked) private var buffer: UnsafeMutablePointer<Element>
    /// Always a power of two, so positions wrap with a mask.
    @exclusivity(unchecked) private var capacity: Int
    @exclusivity(unchecked) private var head = 0
    @exclusivity(unchecked) private(set) var count = 0

    init(capacity: Int = 16) {
        self.capacity = capacity
        buffer = .allocate(capacity: capacity)
    }

    deinit {
        removeAll()
        buffer.deallocate()
    }

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    func append(_ element: consuming Element) {
        if count == capacity { grow() }
        (buffer + ((head &+ count) & (capacity &- 1))).initialize(to: element)
        count &+= 1
    }

    /// Makes room for one more element at the back and returns its slot, which the caller
    /// initializes at once (so an element can be moved in without the ring being retained).
    @inline(__always)
    func reserveLast() -> UnsafeMutablePointer<Element> {
        if count == capacity { grow() }
        let slot = buffer + ((head &+ count) & (capacity &- 1))
        count &+= 1
        return slot
    }

    /// Puts `element` in front of the others (a batch handed back by a suspended drainer).
    func prepend(_ element: Element) {
        if count == capacity { grow() }
        head = (head &- 1) & (capacity &- 1)
        (buffer + head).initialize(to: element)
        count &+= 1
    }

    /// Emptied, the ring starts again at the front of its buffer: a burst touches only as much of
    /// the buffer as it needs, and the same (warm) pages from one burst to the next, instead of
    /// sliding through all of a large buffer (fresh pages the first time round) as the head
    /// advances.
    @inline(__always)
    func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = (buffer + head).move()
        count &-= 1
        head = count == 0 ? 0 : (head &+ 1) & (capacity &- 1)
        return element
    }

    /// Removes the last element (the newest): a thief's end of a worker's local queue.
    func popLast() -> Element? {
        guard count > 0 else { return nil }
        count &-= 1
        return (buffer + ((head &+ count) & (capacity &- 1))).move()
    }

    /// The first element, left in place.
    var first: Element? { count > 0 ? buffer[head] : nil }

    /// Moves every element of `other`, in order, in front of this ring's elements, leaving `other`
    /// empty (a worker's unstarted batch handed back to the front of its run queue).
    func prepend(contentsOf other: JobRing<Element>) { join(other, atFront: true) }

    /// Moves every element of `other`, in order, behind this ring's elements, leaving `other`
    /// empty (the pool's stage drain, a batch handed back behind its level).
    func append(contentsOf other: JobRing<Element>) { join(other, atFront: false) }

    /// The smaller side moves, in at most three bulk moves, and the buffers are swapped when that
    /// was this one: hundreds of staged jobs join a short run queue without being moved one by one.
    private func join(_ other: JobRing<Element>, atFront: Bool) {
        guard !other.isEmpty else { return }
        if count <= other.count {
            other.moveAll(from: self, atFront: !atFront)
            swapContents(with: other)
        } else {
            moveAll(from: other, atFront: atFront)
        }
    }

    /// Moves all of `source`'s elements, in order, in front of or behind this ring's, in bulk (a
    /// run per contiguous stretch of either buffer), and leaves `source` empty.
    private func moveAll(from source: JobRing<Element>, atFront: Bool) {
        let n = source.count
        guard n > 0 else { return }
        while capacity &- count < n { grow() }
        let mask = capacity &- 1
        if atFront { head = (head &- n) & mask }
        let start = atFront ? head : (head &+ count) & mask
        var moved = 0
        while moved < n {
            let from = (source.head &+ moved) & (source.capacity &- 1)
            let to = (start &+ moved) & mask
            let run = min(n &- moved, source.capacity &- from, capacity &- to)
            (buffer + to).moveInitialize(from: source.buffer + from, count: run)
            moved &+= run
        }
        count &+= n
        source.head = 0
        source.count = 0
    }

    /// Exchanges the elements of the two rings (O(1)): a port's deliverer takes the whole inbox.
    func swapContents(with other: JobRing<Element>) {
        let (otherBuffer, otherCapacity, otherHead, otherCount) = (other.buffer, other.capacity, other.head, other.count)
        other.buffer = buffer
        other.capacity = capacity
        other.head = head
        other.count = count
        buffer = otherBuffer
        capacity = otherCapacity
        head = otherHead
        count = otherCount
    }

    func removeAll() {
        while popFirst() != nil {}
        head = 0
    }

    /// Rings up to this many elements double when full; larger ones grow eightfold.
    static var bulkCapacity: Int { 4_096 }

    /// A new buffer twice the size (eight times above `bulkCapacity`); the elements move to its
    /// front in at most two bulk moves (the stretch from the head to the buffer's end, then the
    /// wrapped rest).
    ///
    /// Why eightfold: a ring only grows when a burst outruns it — at one CPU a producer stages a
    /// whole time slice (10^5 jobs) before a worker runs — and every step is an allocation, a copy
    /// of everything queued, the old buffer freed (an `munmap` for a large one) and the new one's
    /// pages touched for the first time. The pool's rings trade buffers (a shard's with the
    /// drainer's spare, the spare's with its run-queue level), so each of them grows to a burst's
    /// size in its turn, and doubling made the first rounds of a flood up to a third slower than
    /// the rest (docs/DispatchPool.md, "Rings grow eightfold"). Eightfold takes a third of the
    /// steps. What it adds is address space: a buffer's pages are touched only as deep as the ring
    /// fills, and, since an emptied ring starts again at the front (`popFirst`), a burst touches
    /// the same pages as the last one.
    private func grow() {
        let newCapacity = capacity < Self.bulkCapacity ? capacity * 2 : capacity * 8
        let newBuffer = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        let firstRun = min(count, capacity - head)
        newBuffer.moveInitialize(from: buffer + head, count: firstRun)
        (newBuffer + firstRun).moveInitialize(from: buffer, count: count - firstRun)
        buffer.deallocate()
        buffer = newBuffer
        capacity = newCapacity
        head = 0
    }
}
