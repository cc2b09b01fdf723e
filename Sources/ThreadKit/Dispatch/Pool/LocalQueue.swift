// LocalQueue: a pool worker's local queue (docs/DispatchPool.md, "Local queues and stealing"): a
// fixed ring of `capacity` (a power of two) slots with one owner and any number of thieves, after
// tokio's multi-threaded scheduler (its `queue.rs`): the owner pushes at the tail and pops at the
// head without a lock; a thief claims a range at the head by a compare-exchange, moves the entries
// out, and releases its claim by a second compare-exchange.
//
// Who may do what:
// - The owner (the worker's own thread): `push`, `pushBatched`, `pop`, `ownerCount`,
//   `acceptsPush`, and `steal…` on its own queue (giving it back). It is the only writer of
//   `tail`, of the slots and their levels, and of `batchEnd`.
// - A thief (any thread): `stealHalf` (into its own queue, of which it is the owner), `stealAll`,
//   `count`. In the pool every thief holds the pool's lock, so at most one claim is in flight, but
//   the protocol does not need that: a thief that finds a claim in flight takes nothing.
//
// Positions are `UInt32`s that only grow (wrapping); slot = position & mask. `head` packs two of
// them, `steal << 32 | real`: entries in [real, tail) are the owner's to pop; [steal, real) is
// claimed by a thief that is still moving them out (steal == real: no claim). The owner's "full"
// check counts from `steal`, so a claimed slot is never overwritten.
//
// The LIFO slot (tokio's `lifo_slot`, Go's `runnext`): the job the running job submitted last
// waits beside the ring, and the owner runs it first, at most `lifoLimit` times in a row (tokio's
// guard: two jobs that keep submitting each other cannot starve the ring); an older one moves to
// the ring's tail. `lifoState` says who may touch the cell: empty (only the owner, to fill it),
// full (the owner takes it back with a compare-exchange to empty; `stealAll` claims it with one to
// taking), taking (`stealAll` is moving it out; it stores empty after). `stealHalf` leaves it
// alone, as tokio does, so an idle thief does not take a lone continuation; but `stealAll` (a
// worker that blocks gives its queue back, the monitor takes a stalled worker's) takes it too, so
// a job that runs long or blocks never holds its continuation back (tokio's slot has no such way
// out). Models/LocalQueue.pml checks both protocols together.
import Synchronization

// safety: the slots are shared by the protocol above: a slot is written only by the owner and only
// while outside [steal, tail) (free), read (moved out) only by whoever advanced `real` past it (the
// owner's pop) or claimed it (a thief's range), each once; `tail`'s release store publishes a
// written slot, `head`'s acquire-release compare-exchanges hand a slot from reader back to writer.
struct LocalQueue<Element>: ~Copyable, @unchecked Sendable {
    static var capacity: Int { 256 }
    private static var mask: UInt32 { UInt32(capacity - 1) }

    /// `steal << 32 | real`. Acquire-release compare-exchanges: the one that takes a slot (pop,
    /// claim) must see the owner's write of it (also ordered by `tail`), and the one that gives it
    /// back (pop, claim release) must order the move out before the owner's next write of the
    /// slot, which loads `head` with acquire.
    private let head = Atomic<UInt64>(0)
    /// The next position the owner writes. Written only by the owner, with release (publishes the
    /// slot and its level); thieves load it with acquire.
    private let tail = Atomic<UInt32>(0)
    /// Positions before this came to the queue in a batch from the run queues (`pushBatched`);
    /// compared by wrapping distance. Written by the owner only (relaxed: its store precedes the
    /// release of `tail` that publishes the batched entries, and a thief reads it before it
    /// releases its claim, so the owner's later store cannot be the one a thief reads for them).
    private let batchEnd = Atomic<UInt32>(0)
    // safety: `capacity` elements, allocated in init and freed in deinit (live ones deinitialized
    // first); which slots are live and who may touch them is the protocol above.
    private let slots: UnsafeMutablePointer<Element>
    /// The level each slot's entry was pushed under, written with the slot: a thief that claimed
    /// entries reads the level they were pushed under, whatever the owner pushes since.
    // safety: as `slots` (plain bytes, nothing to deinitialize).
    private let levels: UnsafeMutablePointer<UInt8>
    /// `lifoEmpty`, `lifoFull` or `lifoTaking`; see the header. Acquire-release transitions: the
    /// owner's fill is published by its release store of full, a taker's move out ordered before
    /// its transition back to empty.
    private let lifoState = Atomic<UInt8>(0)
    private static var lifoEmpty: UInt8 { 0 }
    private static var lifoFull: UInt8 { 1 }
    private static var lifoTaking: UInt8 { 2 }
    // safety: one element, allocated in init and freed in deinit (deinitialized first if full);
    // written only by the owner while empty, moved out only by whoever moved the state out of full.
    private let lifoCell: UnsafeMutablePointer<Element>
    /// The LIFO job's level, written by the owner with the cell. (A pointer, not a stored `var`: the
    /// queue is a `~Copyable` struct whose methods are not mutating.)
    // safety: as `lifoCell`.
    private let lifoLevel: UnsafeMutablePointer<UInt8>
    /// LIFO jobs the owner may run in a row before the ring's oldest goes first (tokio's
    /// `MAX_LIFO_POLLS_PER_TICK`).
    static var lifoLimit: Int { 3 }

    init() {
        // safety: both freed in deinit.
        slots = .allocate(capacity: Self.capacity)
        levels = .allocate(capacity: Self.capacity)
        levels.initialize(repeating: 0, count: Self.capacity)
        // safety: freed in deinit; the cell stays uninitialized until the owner fills it.
        lifoCell = .allocate(capacity: 1)
        lifoLevel = .allocate(capacity: 1)
        lifoLevel.initialize(to: 0)
    }

    deinit {
        if lifoState.load(ordering: .acquiring) == Self.lifoFull {
            // safety: full and nobody left to take it: moved out once.
            _ = lifoCell.move()
        }
        lifoCell.deallocate()
        lifoLevel.deallocate()
        // No owner or thief is left: whatever was pushed and not taken is [real, tail).
        let (_, real) = Self.unpack(head.load(ordering: .acquiring))
        let end = tail.load(ordering: .acquiring)
        var position = real
        while position != end {
            // safety: a live slot (pushed, not taken), deinitialized once.
            _ = (slots + Int(position & Self.mask)).move()
            position &+= 1
        }
        slots.deallocate()
        levels.deallocate()
    }

    @inline(__always)
    private static func unpack(_ word: UInt64) -> (steal: UInt32, real: UInt32) {
        (UInt32(truncatingIfNeeded: word >> 32), UInt32(truncatingIfNeeded: word))
    }

    @inline(__always)
    private static func pack(steal: UInt32, real: UInt32) -> UInt64 { UInt64(steal) << 32 | UInt64(real) }

    /// Whether `position` came in a batch (`position < batchEnd`, wrapping).
    @inline(__always)
    private static func isBatched(_ position: UInt32, batchEnd: UInt32) -> Bool {
        Int32(bitPattern: batchEnd &- position) > 0
    }

    // MARK: Owner

    /// The entries the owner may still pop (claimed ones not counted), the LIFO slot's included.
    /// Owner only.
    var ownerCount: Int {
        let (_, real) = Self.unpack(head.load(ordering: .acquiring))
        return Int(tail.load(ordering: .relaxed) &- real) + (lifoState.load(ordering: .acquiring) == Self.lifoFull ? 1 : 0)
    }

    /// Whether a job of `level` may be pushed now (`pushNewest` or `push`), and how many the owner
    /// holds before it: the queue (the LIFO slot included) is empty or holds `level`, fewer than
    /// `unbatchedLimit` of its entries are not batched, and a ring slot is free (counted from the
    /// steal head: claimed slots are not free). Owner only.
    func acceptsPush(level: Int, unbatchedLimit: Int) -> Int? {
        let (steal, real) = Self.unpack(head.load(ordering: .acquiring))
        let end = tail.load(ordering: .relaxed)
        // Full or being taken: either way the slot holds a job of `lifoLevel` for this look.
        let lifo = lifoState.load(ordering: .acquiring) != Self.lifoEmpty ? 1 : 0
        let ring = Int(end &- real)
        guard Int(end &- steal) < Self.capacity else { return nil }
        if lifo != 0 {
            guard Int(lifoLevel.pointee) == level else { return nil }
        } else if ring != 0 {
            guard Int(levels[Int((end &- 1) & Self.mask)]) == level else { return nil }
        }
        let batchedUntil = batchEnd.load(ordering: .relaxed)
        let firstUnbatched = Self.isBatched(real, batchEnd: batchedUntil) ? batchedUntil : real
        guard Int(end &- firstUnbatched) + lifo < unbatchedLimit else { return nil }
        return ring + lifo
    }

    /// Pushes `element`, which the running job just submitted, as the newest job: into the LIFO
    /// slot; a job already there moves to the ring's tail. Into an empty queue it goes to the
    /// ring, where it is next all the same (a ping-pong hop costs what a plain push and pop do).
    /// If a `stealAll` is taking the slot's job right now, `element` goes to the ring's tail. The
    /// caller checked `acceptsPush`. Owner only.
    @inline(__always)
    func pushNewest(_ element: consuming Element, level: Int) {
        if lifoState.load(ordering: .acquiring) == Self.lifoEmpty {
            let (_, real) = Self.unpack(head.load(ordering: .acquiring))
            if tail.load(ordering: .relaxed) == real { return push(element, level: level) }
        }
        pushIntoLifo(element, level: level)
    }

    /// `pushNewest` into a queue that holds jobs. Owner only.
    private func pushIntoLifo(_ element: consuming Element, level: Int) {
        if lifoState.load(ordering: .acquiring) != Self.lifoEmpty {
            guard let older = takeLifo() else {
                // Being taken by `stealAll`: the slot is not the owner's until it is empty again.
                return push(element, level: level)
            }
            push(older, level: Int(lifoLevel.pointee))
        }
        // safety: empty, and only the owner fills it: no live entry in the cell, nobody reads it
        // until the release store below.
        lifoCell.initialize(to: element)
        lifoLevel.pointee = UInt8(truncatingIfNeeded: level)
        lifoState.store(Self.lifoFull, ordering: .releasing)
    }

    /// The LIFO slot's job, taken back by the owner (its level stays in `lifoLevel` until the owner
    /// fills the slot again); nil when it is empty or being taken. Owner only.
    private func takeLifo() -> Element? {
        // A plain load first: the owner asks on every pop, and an empty slot costs no locked
        // instruction.
        guard lifoState.load(ordering: .relaxed) == Self.lifoFull,
            lifoState.compareExchange(
                expected: Self.lifoFull, desired: Self.lifoEmpty, ordering: .acquiringAndReleasing
            ).exchanged
        else { return nil }
        // safety: the exchange out of full gave the cell to this thread alone; only the owner (this
        // thread) fills it again.
        return lifoCell.move()
    }

    /// The owner's next job: the LIFO slot's while `lifoStreak` (LIFO jobs run in a row, kept by
    /// the owner) is under `lifoLimit`; past it, the slot's job moves to the ring's tail and the
    /// ring's oldest comes first, as in tokio. Owner only.
    @inline(__always)
    func popNext(lifoStreak: inout Int) -> (Element, level: Int, batched: Bool)? {
        // The slot empty (a plain load; only the owner fills it): the ring's head, as `pop`.
        if lifoState.load(ordering: .relaxed) == Self.lifoEmpty {
            lifoStreak = 0
            return pop()
        }
        return popWithLifo(lifoStreak: &lifoStreak)
    }

    /// `popNext` while the slot is full or being taken. Owner only.
    private func popWithLifo(lifoStreak: inout Int) -> (Element, level: Int, batched: Bool)? {
        if lifoStreak < Self.lifoLimit {
            if let element = takeLifo() {
                lifoStreak += 1
                return (element, Int(lifoLevel.pointee), false)
            }
        } else if freeSlots > 0, let element = takeLifo() {
            push(element, level: Int(lifoLevel.pointee))
        }
        lifoStreak = 0
        if let next = pop() { return next }
        // The ring is empty and the slot's job could not move there (no free slot): run it.
        guard let element = takeLifo() else { return nil }
        lifoStreak = 1
        return (element, Int(lifoLevel.pointee), false)
    }

    /// Appends `element` (moved) at the tail. The caller checked `acceptsPush` (or knows a slot is
    /// free: a refill into an empty queue). Owner only.
    @inline(__always)
    func push(_ element: consuming Element, level: Int) {
        let end = tail.load(ordering: .relaxed)
        let slot = Int(end & Self.mask)
        // safety: the caller checked that `end - steal < capacity`, and `steal` only grows, so the
        // slot is outside every claim and every live range: free. Published by the store below.
        (slots + slot).initialize(to: element)
        levels[slot] = UInt8(truncatingIfNeeded: level)
        tail.store(end &+ 1, ordering: .releasing)
    }

    /// Slots the owner may still write (claimed ones are not free). Owner only.
    var freeSlots: Int {
        let (steal, _) = Self.unpack(head.load(ordering: .acquiring))
        return Self.capacity - Int(tail.load(ordering: .relaxed) &- steal)
    }

    /// Marks the next `count` pushes as a batch from the run queues (before pushing them, so a
    /// thief that sees them sees the mark). Owner only, queue empty.
    func beginBatch(count: Int) {
        batchEnd.store(tail.load(ordering: .relaxed) &+ UInt32(count), ordering: .relaxed)
    }

    /// The entry at the head (moved out), the level it was pushed under, and whether it came in a
    /// batch; nil when the owner holds none. Owner only.
    func pop() -> (Element, level: Int, batched: Bool)? {
        var word = head.load(ordering: .acquiring)
        let end = tail.load(ordering: .relaxed)
        var taken: UInt32
        while true {
            let (steal, real) = Self.unpack(word)
            if real == end { return nil }
            taken = real
            // A claim in flight keeps its steal head; with none, both heads move.
            let next = Self.pack(steal: steal == real ? real &+ 1 : steal, real: real &+ 1)
            let (exchanged, original) = head.compareExchange(
                expected: word, desired: next, ordering: .acquiringAndReleasing)
            if exchanged { break }
            word = original
        }
        let end2 = batchEnd.load(ordering: .relaxed)
        let batched = Self.isBatched(taken, batchEnd: end2)
        if !batched && Int32(bitPattern: taken &- end2) > 1 << 30 {
            // Keep `batchEnd` within wrapping reach of the live positions (a worker that pushes
            // and pops its own jobs for 2^31 positions without a refill): moved up to a position
            // no live or claimed entry precedes, so no answer changes.
            batchEnd.store(Self.unpack(word).steal, ordering: .relaxed)
        }
        let slot = Int(taken & Self.mask)
        // safety: the compare-exchange moved `real` past `taken` for this thread alone; the slot
        // was published by the owner's own store of `tail`.
        return ((slots + slot).move(), Int(levels[slot]), batched)
    }

    // MARK: Thieves

    /// The entries pushed and not yet taken or claimed, the LIFO slot's included (a snapshot).
    /// Any thread.
    var count: Int {
        let (_, real) = Self.unpack(head.load(ordering: .acquiring))
        return Int(tail.load(ordering: .acquiring) &- real) + (lifoState.load(ordering: .acquiring) == Self.lifoFull ? 1 : 0)
    }

    /// Claims the older `(n + 1) / 2` of the owner's `n` entries (all of them with `all`).
    /// Returns the claimed range's first position, its length, and the claimed word; nil when the
    /// queue is empty or another claim is in flight. (Internal for the tests, which hold a claim
    /// open to look at the queue meanwhile.)
    func claim(all: Bool) -> (first: UInt32, count: UInt32, word: UInt64)? {
        var word = head.load(ordering: .acquiring)
        while true {
            let (steal, real) = Self.unpack(word)
            if steal != real { return nil } // another thief is moving entries out
            let end = tail.load(ordering: .acquiring)
            let available = end &- real
            let n = all ? available : available - available / 2
            if n == 0 { return nil }
            let next = Self.pack(steal: steal, real: real &+ n)
            let (exchanged, original) = head.compareExchange(
                expected: word, desired: next, ordering: .acquiringAndReleasing)
            if exchanged { return (real, n, next) }
            word = original
        }
    }

    /// Releases a claim: the steal head catches up with the real head (which the owner may have
    /// moved meanwhile), and the claimed slots are free for the owner again.
    func release(_ claimed: UInt64) {
        var word = claimed
        while true {
            let (_, real) = Self.unpack(word)
            let (exchanged, original) = head.compareExchange(
                expected: word, desired: Self.pack(steal: real, real: real), ordering: .acquiringAndReleasing)
            if exchanged { return }
            word = original
        }
    }

    /// Moves the older half of this queue's entries (rounded up) into `thief`'s queue, of which the
    /// caller is the owner and which is empty, and returns the first of them (the oldest, moved
    /// out) with its level; the rest keep their order and their batched marks. Nil when there is
    /// nothing to take or another claim is in flight. Any thread but this queue's owner.
    func stealHalf(into thief: borrowing LocalQueue<Element>) -> (Element, level: Int)? {
        // Half of this queue fits in the thief's only while claims on the thief's own slots leave
        // half of them free (tokio's check).
        guard thief.freeSlots > Self.capacity / 2 else { return nil }
        guard let (first, n, word) = claim(all: false) else { return nil }
        let slot = Int(first & Self.mask)
        let level = Int(levels[slot])
        // Read before the release below: see `batchEnd`.
        let end = batchEnd.load(ordering: .relaxed)
        let batchedCount = Self.isBatched(first, batchEnd: end) ? min(end &- first, n) : 0
        // safety: claimed for this thread alone ([first, first + n) left the owner's range and the
        // owner's full check keeps it from writing there until `release`); published by the
        // owner's release store of `tail`, which `claim` loaded with acquire.
        let oldest = (slots + slot).move()
        if n > 1 { thief.beginBatch(count: Int(batchedCount > 0 ? batchedCount - 1 : 0)) }
        var position = first &+ 1
        while position != first &+ n {
            // safety: as for `oldest`: each claimed slot is moved out once.
            thief.push((slots + Int(position & Self.mask)).move(), level: level)
            position &+= 1
        }
        release(word)
        return (oldest, level)
    }

    /// Moves every entry the owner holds, in order, to the back of `ring`, the LIFO slot's (the
    /// newest) last, and returns their level (nil: nothing taken). Any thread (the owner too: it
    /// gives its own queue back).
    func stealAll(into ring: JobRing<Element>) -> Int? {
        var level: Int?
        if let (first, n, word) = claim(all: true) {
            level = Int(levels[Int(first & Self.mask)])
            var position = first
            while position != first &+ n {
                // safety: claimed for this thread alone, as in `stealHalf`.
                ring.append((slots + Int(position & Self.mask)).move())
                position &+= 1
            }
            release(word)
        }
        if lifoState.compareExchange(
            expected: Self.lifoFull, desired: Self.lifoTaking, ordering: .acquiringAndReleasing
        ).exchanged {
            // safety: the exchange out of full gave the cell to this thread alone, and the owner
            // does not fill it again until the store of empty below.
            ring.append(lifoCell.move())
            level = level ?? Int(lifoLevel.pointee)
            lifoState.store(Self.lifoEmpty, ordering: .releasing)
        }
        return level
    }
}
