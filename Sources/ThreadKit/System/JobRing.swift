// JobRing: the FIFO under every dispatch queue, pool run queue, operation ready queue and port
// inbox: a growable ring buffer whose elements are moved in and out (never copied).
// Not thread-safe: each ring is guarded by its owner's lock (a queue's ring by `queue.lock`, a
// level of the run queues by `pool.lock`, a port's inbox by its mutex) or belongs to one thread
// (a drainer's batch ring, a port's delivery batch). A class so a drainer can swap a queue's ring
// with its own in O(1) under the lock. A ring that grew past `retainedCapacity` gives its buffer
// back when its owner calls `settle` and finds its size unneeded for `quietNanoseconds` (see
// `settle`); owners that never call it keep their buffers, as before.
import Glibc

// safety: every ring is touched by one thread at a time: under its owner's lock, or by the one
// thread it belongs to (see above); handing it to another thread goes through that lock.
final class JobRing<Element>: @unchecked Sendable {
    // Guarded by the owner (see above): the runtime's dynamic exclusivity checks are off for the
    // fields, which every push and pop touches.
    // safety: the owner's lock (or single owning thread) keeps accesses to these fields from
    // overlapping, which is all the runtime check would catch. `buffer` holds `capacity`
    // elements, owned by the ring (freed when replaced and in deinit); live ones are the `count`
    // from `head`, wrapping with the power-of-two mask.
    @exclusivity(unchecked) private var buffer: UnsafeMutablePointer<Element>
    /// Always a power of two, so positions wrap with a mask.
    @exclusivity(unchecked) private var capacity: Int
    @exclusivity(unchecked) private var head = 0
    // safety: guarded by the owner, as `buffer`.
    @exclusivity(unchecked) private(set) var count = 0
    /// The most elements the buffer held since the last `settle`. Belongs to the buffer: it moves
    /// with it in `swapContents`.
    // safety: guarded by the owner, as the fields above.
    @exclusivity(unchecked) private var highWater = 0
    /// When (`settle`'s clock) the buffer's size was last found needed; belongs to the buffer.
    // safety: guarded by the owner, as the fields above.
    @exclusivity(unchecked) private var neededAt: UInt64 = 0
    /// The capacity the ring starts with, and shrinks back to (a power of two).
    let baseCapacity: Int

    init(capacity: Int = 16) {
        self.capacity = capacity
        baseCapacity = capacity
        // safety: freed in deinit, or by `settle`/`grow` when replaced.
        buffer = .allocate(capacity: capacity)
    }

    deinit {
        removeAll()
        Self.free(buffer, capacity: capacity)
    }

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    func append(_ element: consuming Element) {
        if count == capacity { grow() }
        // safety: count < capacity now, so the masked slot past the last element is free.
        (buffer + ((head &+ count) & (capacity &- 1))).initialize(to: element)
        count &+= 1
        if count > highWater { highWater = count }
    }

    /// Makes room for one more element at the back and returns its slot, which the caller
    /// initializes at once (so an element can be moved in without the ring being retained).
    // safety: the slot is inside the buffer and already counted, so the caller must initialize
    // it before anyone else can reach the ring: it still holds the owner's lock when it does.
    @inline(__always)
    func reserveLast() -> UnsafeMutablePointer<Element> {
        if count == capacity { grow() }
        let slot = buffer + ((head &+ count) & (capacity &- 1))
        count &+= 1
        if count > highWater { highWater = count }
        return slot
    }

    /// Puts `element` in front of the others (a batch handed back by a suspended drainer).
    func prepend(_ element: Element) {
        if count == capacity { grow() }
        head = (head &- 1) & (capacity &- 1)
        // safety: count < capacity after the grow check, so the slot before the head is free.
        (buffer + head).initialize(to: element)
        count &+= 1
        if count > highWater { highWater = count }
    }

    /// Emptied, the ring starts again at the front of its buffer: a burst touches only as much of
    /// the buffer as it needs, and the same (warm) pages from one burst to the next, instead of
    /// sliding through all of a large buffer (fresh pages the first time round) as the head
    /// advances.
    @inline(__always)
    func popFirst() -> Element? {
        guard count > 0 else { return nil }
        // safety: count > 0, so the head slot holds a live element; it is uncounted just below.
        let element = (buffer + head).move()
        count &-= 1
        head = count == 0 ? 0 : (head &+ 1) & (capacity &- 1)
        return element
    }

    /// Removes the last element (the newest): a thief's end of a worker's local queue.
    func popLast() -> Element? {
        guard count > 0 else { return nil }
        count &-= 1
        // safety: the slot of the last element, live until this move (count was > 0).
        return (buffer + ((head &+ count) & (capacity &- 1))).move()
    }

    /// The first element, left in place.
    var first: Element? { count > 0 ? buffer[head] : nil }

    /// Moves every element of `other`, in order, in front of this ring's elements, leaving `other`
    /// empty (a batch handed back by a suspended drainer). `keepingBuffers`: this ring's elements
    /// never move into `other`'s buffer, so neither ring changes buffers (see `join`).
    func prepend(contentsOf other: JobRing<Element>, keepingBuffers: Bool = false) {
        join(other, atFront: true, keepingBuffers: keepingBuffers)
    }

    /// Moves every element of `other`, in order, behind this ring's elements, leaving `other`
    /// empty (the pool's stage drain). `keepingBuffers`: as for `prepend(contentsOf:)`.
    func append(contentsOf other: JobRing<Element>, keepingBuffers: Bool = false) {
        join(other, atFront: false, keepingBuffers: keepingBuffers)
    }

    /// The smaller side moves, in at most three bulk moves, and the buffers are swapped when that
    /// was this one: hundreds of staged jobs join a short run queue without being moved one by one.
    /// With `keepingBuffers`, `other`'s elements move whatever the sizes: a worker's local queue
    /// (32 entries) handed back to an empty level would otherwise leave with the level's buffer —
    /// possibly a burst's, which a local queue never gives back.
    private func join(_ other: JobRing<Element>, atFront: Bool, keepingBuffers: Bool) {
        guard !other.isEmpty else { return }
        if count <= other.count && !keepingBuffers {
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
            // safety: `run` stops at both buffers' ends; the source slots are live, the target
            // ones free (room for n was made above); both rings are under the caller's lock(s).
            (buffer + to).moveInitialize(from: source.buffer + from, count: run)
            moved &+= run
        }
        count &+= n
        if count > highWater { highWater = count }
        source.head = 0
        source.count = 0
    }

    /// Exchanges the elements of the two rings (O(1)): a port's deliverer takes the whole inbox.
    /// The buffers change hands with what `settle` knows of them; each ring keeps its base.
    func swapContents(with other: JobRing<Element>) {
        let (otherBuffer, otherCapacity, otherHead, otherCount) = (other.buffer, other.capacity, other.head, other.count)
        let (otherHighWater, otherNeededAt) = (other.highWater, other.neededAt)
        other.buffer = buffer
        other.capacity = capacity
        other.head = head
        other.count = count
        other.highWater = highWater
        other.neededAt = neededAt
        buffer = otherBuffer
        capacity = otherCapacity
        head = otherHead
        count = otherCount
        highWater = otherHighWater
        neededAt = otherNeededAt
    }

    func removeAll() {
        while popFirst() != nil {}
        head = 0
    }

    /// Rings up to this many elements double when full; larger ones grow eightfold.
    static var bulkCapacity: Int { 4_096 }

    /// A ring keeps a buffer of up to this many elements (or its base capacity, if larger) for
    /// good: 128 KiB of 32-byte dispatch entries, which the doubling regime regrows in a few
    /// microseconds. Larger buffers are given back by `settle`.
    static var retainedCapacity: Int { bulkCapacity }

    /// How long (in `settle`'s clock, nanoseconds) a buffer above `retainedCapacity` must go
    /// unneeded before `settle` gives it back: 1 s.
    static var quietNanoseconds: UInt64 { 1_000_000_000 }

    /// Frees a buffer whose elements are gone. One above `retainedCapacity` first hands its whole
    /// pages back to the kernel (MADV_DONTNEED): glibc serves such a buffer from a thread's arena
    /// once its dynamic mmap threshold has risen (it does after the first large free), and a buffer
    /// freed there merges into the arena's top, whose pages stay resident — malloc_trim trims
    /// only the main arena's top. Measured: 8–16 MiB of a burst's stale entries stayed after every
    /// ring had shrunk (issue 49).
    // safety: callers pass the ring's own buffer with its elements moved out or destroyed, and
    // replace or drop the reference at once, so nothing reads the buffer after this.
    private static func free(_ buffer: UnsafeMutablePointer<Element>, capacity: Int) {
        if capacity > retainedCapacity {
            let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
            let start = (UInt(bitPattern: buffer) + page - 1) & ~(page - 1)
            let end = UInt(bitPattern: buffer + capacity) & ~(page - 1)
            // safety: [start, end) lies inside the buffer's own `capacity` elements (page-rounded
            // inwards), which hold no element any more and are not freed yet; malloc's headers lie
            // outside it (the chunk's before the buffer, the next chunk's size field past its end),
            // and whatever free() writes afterwards lands on fresh zero pages.
            if end > start { _ = madvise(UnsafeMutableRawPointer(bitPattern: start), Int(end - start), Int32(MADV_DONTNEED)) }
        }
        buffer.deallocate()
    }

    /// Whether the buffer is one that `settle` may give back.
    var isOversized: Bool { capacity > max(baseCapacity, Self.retainedCapacity) }

    /// The capacity of the current buffer (tests, descriptions).
    var currentCapacity: Int { capacity }

    /// The owner's look at the ring (`now`: a monotonic clock in nanoseconds, the caller's; a
    /// ring never reads a clock). Returns true when it gave its buffer back.
    ///
    /// The rule, for a buffer above `retainedCapacity` (smaller ones are kept for good): its size
    /// counts as needed at a `settle` if the buffer held more than an eighth of its capacity since
    /// the previous one (more than the next size down, `grow`'s step, would hold). Once it has gone
    /// unneeded for `quietNanoseconds` since the last `settle` that found it needed, the first
    /// `settle` that finds the ring empty frees it and the ring starts again at `baseCapacity`.
    ///
    /// The hysteresis: a flood that fills the buffer even once between two `settle`s keeps it, so
    /// it is not freed and regrown every round; a burst's buffer goes one quiet second (or more:
    /// the owner decides when it looks) after the burst. Owners call it where an oversized buffer
    /// passes through their hands (a level emptied, a stage drain, a serial lane going idle) and
    /// again once they have been quiet (a pool worker's idle timeout, a serial lane's timer).
    @discardableResult
    func settle(now: UInt64) -> Bool {
        defer { highWater = count }
        guard isOversized else { return false }
        if highWater > capacity / 8 { neededAt = now }
        guard count == 0, now &- neededAt >= Self.quietNanoseconds else { return false }
        Self.free(buffer, capacity: capacity)
        capacity = baseCapacity
        // safety: replaces the buffer just freed (it held no element: count == 0).
        buffer = .allocate(capacity: baseCapacity)
        head = 0
        neededAt = 0
        return true
    }

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
        // safety: the `count` live elements move in (two runs, head to end then the wrapped
        // rest) before the old buffer is freed; the caller holds the owner's lock throughout.
        let newBuffer = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        let firstRun = min(count, capacity - head)
        newBuffer.moveInitialize(from: buffer + head, count: firstRun)
        // safety: the wrapped rest, from the buffer's start: count - firstRun live elements.
        (newBuffer + firstRun).moveInitialize(from: buffer, count: count - firstRun)
        Self.free(buffer, capacity: capacity)
        buffer = newBuffer
        capacity = newCapacity
        head = 0
    }
}
