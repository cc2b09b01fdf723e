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

    @inline(__always)
    func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = (buffer + head).move()
        head = (head &+ 1) & (capacity &- 1)
        count &-= 1
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

    /// Moves every element of `other` (in order) in front of this ring's elements.
    func prepend(contentsOf other: JobRing<Element>) {
        var reversed: [Element] = []
        reversed.reserveCapacity(other.count)
        while let element = other.popFirst() { reversed.append(element) }
        for element in reversed.reversed() { prepend(element) }
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

    private func grow() {
        let newCapacity = capacity * 2
        let newBuffer = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        for i in 0..<count {
            (newBuffer + i).moveInitialize(from: buffer + ((head + i) & (capacity - 1)), count: 1)
        }
        buffer.deallocate()
        buffer = newBuffer
        capacity = newCapacity
        head = 0
    }
}
