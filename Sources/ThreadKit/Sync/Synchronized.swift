// synchronized(token): @synchronized for Swift. A recursive lock per token identity, found in a
// striped table. Thread-safe.
//
// Fast path (one atomic operation to lock, one to unlock; none on re-entry): each stripe has a few
// slots whose lock stays bound to the last token that used it ("sticky"). A thread scans its
// stripe's slots for the token with plain loads, try-locks the slot it finds, and checks the
// binding again under the lock: a binding changes only while its slot is locked by the thread
// rebinding it, so once locked and still bound to the token, the slot is the token's lock. The
// fast path never waits (a stale binding would make it wait for another token).
//
// Slow path (the stripe's mutex, a leaf taken only to look up, bind or pin, never while waiting
// for a slot's lock): a slot bound to the token is pinned (`waiters`) and waited for; otherwise
// one that nobody holds, waits for or has pinned is rebound to it (locked first); if there is none,
// the token gets an overflow entry counted by its users and dropped when none is left. A token is
// bound to at most one place at a time: bindings and overflow entries are made only under the
// stripe's mutex, after looking at both, and a slot is never rebound to a token while that token
// has an overflow entry.
import Synchronization

/// Runs `body` holding a recursive lock that belongs to `token`'s identity, as Objective-C's
/// `@synchronized(token)`. Threads using different tokens do not block each other; the same
/// thread may nest on the same token. The lock is released however `body` exits, including by a
/// thrown error.
///
/// Inlinable, so the fast path is specialized into the caller (an unspecialized generic call with
/// its closure context and indirect result cost more than the lock).
@inlinable
public func synchronized<T>(_ token: AnyObject, _ body: () throws -> T) rethrows -> T {
    let id = UInt(bitPattern: ObjectIdentifier(token))
    let table = SyncTable.shared
    // The lock-order checker (docs/Diagnostics.md §1) sees a token as a lock taken by a blocking
    // acquisition: the slow path's lock() or rebinding, never the fast path's try-lock.
    let slot = DiagnosticsSwitch.isOn(.lockOrder) ? -1 : table.fastLock(id)
    if slot >= 0 {
        defer { table.unlockSlot(slot) }
        return try body()
    }
    let entry = table.slowLock(id, token: token)
    defer { table.unlock(entry) }
    return try body()
}

// safety: the stripes are immutable after init and each locks itself.
/// The table of per-token locks: 64 stripes of `slotsPerStripe` sticky slots plus an overflow
/// list each. A token's identity stays valid while the caller holds it, so it cannot be reused
/// by another object during that time; a slot left bound to a dead identity is simply rebound,
/// or found by a new object at the same address (its lock then serves that object, and the
/// lock-order checker gives it a new identity: `Entry.orderToken`).
@usableFromInline
final class SyncTable: @unchecked Sendable {
    @usableFromInline static let shared = SyncTable()

    // safety: the token word is atomic; `users`, `waiters` and `orderToken` are touched only under
    // the stripe's mutex or the entry's lock, as each says.
    @usableFromInline
    final class Entry: @unchecked Sendable {
        let lock = TKRecursiveLock()
        /// The token identity the entry belongs to (0: none). A sticky slot's binding is written
        /// only by a thread holding both the stripe's mutex and the slot's lock, and read by the
        /// fast path without either (relaxed: the re-check after locking is what counts, ordered
        /// by the lock's acquire). Sticky slots keep it in the table's flat buffer; overflow
        /// entries own theirs.
        let tokenWord: UnsafeMutablePointer<Atomic<UInt>>
        var token: UInt {
            get { tokenWord.pointee.load(ordering: .relaxed) }
            set { tokenWord.pointee.store(newValue, ordering: .relaxed) }
        }
        /// Overflow entries only: threads holding or waiting for it. Guarded by the stripe's mutex.
        var users = 0
        /// Sticky slots only: threads of the slow path waiting for its lock. While above zero the
        /// slot is not rebound. Guarded by the stripe's mutex.
        var waiters = 0
        /// Sticky slots, lock-order checker on: the token object whose identity the lock's
        /// lock-order node stands for. A binding outlives its token (the table never learns of a
        /// token's death), and a new object may be allocated at the dead one's address: then the
        /// binding matches, but the node's edges are the dead token's. Weak, so it reads nil (or
        /// another object) exactly then. Guarded by the stripe's mutex; written by the slow path.
        weak var orderToken: AnyObject?
        /// Which stripe's overflow list it is in; nil for a sticky slot. Immutable.
        let overflowStripe: Int?

        init(overflowStripe: Int?, tokenWord: UnsafeMutablePointer<Atomic<UInt>>? = nil) {
            self.overflowStripe = overflowStripe
            if let tokenWord {
                self.tokenWord = tokenWord
            } else {
                self.tokenWord = .allocate(capacity: 1)
                self.tokenWord.initialize(to: Atomic(0))
            }
        }

        deinit {
            if overflowStripe != nil { tokenWord.deallocate() }
        }
    }

    // safety: `overflow` is touched only under `mutex`; `slots` is immutable.
    fileprivate final class Stripe: @unchecked Sendable {
        let mutex = RawMutex()
        /// The sticky slots, made once; the array never changes.
        let slots: [Entry]
        var overflow: [Entry] = [] // guarded by `mutex`
        init(_ tokenWords: UnsafeMutablePointer<Atomic<UInt>>, slots: Int) {
            self.slots = (0..<slots).map { Entry(overflowStripe: nil, tokenWord: tokenWords + $0) }
        }
    }

    @usableFromInline static let slotsPerStripe = 4
    @usableFromInline static let stripeCount = 64
    private let stripes: [Stripe]

    /// The fast path's view of every stripe's sticky slots, stripe after stripe: their token words
    /// in one flat buffer, and their locks as unretained references (the stripes own the entries
    /// for the life of the table, the process). Reading them costs no reference counting, which
    /// cost more than the lock itself.
    @usableFromInline let tokenWords: UnsafeMutablePointer<Atomic<UInt>>
    /// Unretained references to the slots' locks, flat like `tokenWords`.
    @usableFromInline let locks: UnsafeMutablePointer<Unmanaged<TKRecursiveLock>>

    private init() {
        let total = SyncTable.stripeCount * SyncTable.slotsPerStripe
        tokenWords = .allocate(capacity: total)
        for i in 0..<total { (tokenWords + i).initialize(to: Atomic(0)) }
        let words = tokenWords
        stripes = (0..<SyncTable.stripeCount).map { Stripe(words + $0 * SyncTable.slotsPerStripe, slots: SyncTable.slotsPerStripe) }
        locks = .allocate(capacity: total)
        locks.initialize(from: stripes.flatMap { $0.slots.map { Unmanaged.passUnretained($0.lock) } }, count: total)
    }

    /// Objects are 16-byte aligned: drop the low bits before picking a stripe.
    @inlinable @inline(__always) func stripeIndex(_ id: UInt) -> Int { Int((id >> 4) & UInt(SyncTable.stripeCount - 1)) }

    /// How many entries are held or waited for now (for tests: the table must not keep tokens).
    var count: Int {
        stripes.reduce(0) { total, stripe in
            total + stripe.slots.filter { $0.lock.isHeld }.count + stripe.mutex.withLock { stripe.overflow.count }
        }
    }

    /// How many entries exist: the sticky slots plus the overflow entries in use.
    var capacity: Int {
        stripes.reduce(0) { total, stripe in total + stripe.slots.count + stripe.mutex.withLock { stripe.overflow.count } }
    }

    /// The fast path: the index of the token's sticky slot, taken if nobody else holds it (re-entry
    /// included); -1 otherwise. It never waits: a slot read as bound to the token may be rebound
    /// meanwhile, and waiting on it would wait for another token, which can deadlock a program that
    /// takes its tokens in a consistent order.
    @inlinable @inline(__always)
    func fastLock(_ id: UInt) -> Int {
        let base = stripeIndex(id) &* SyncTable.slotsPerStripe
        for index in base..<(base &+ SyncTable.slotsPerStripe) {
            let word = tokenWords + index
            guard word.pointee.load(ordering: .relaxed) == id else { continue }
            let lock = locks[index]
            // No lock-order hook: this path runs only while the checker is off (synchronized()).
            guard lock._withUnsafeGuaranteedRef({ $0.tryLockWithoutOrderCheck() }) else { return -1 }
            // Relaxed: the binding changes only under the slot's lock, which we now hold (its
            // acquire ordered the rebinder's store before this load), so it is the binding.
            if word.pointee.load(ordering: .relaxed) == id { return index }
            lock._withUnsafeGuaranteedRef { $0.unlock() } // rebound before we locked it
            return -1
        }
        return -1
    }

    @inlinable @inline(__always)
    func unlockSlot(_ index: Int) {
        locks[index]._withUnsafeGuaranteedRef { $0.unlock() }
    }

    /// Under the stripe's mutex: waits for the token's slot (pinned by `waiters`, so it cannot be
    /// rebound meanwhile), or binds a free sticky slot to it, or uses an overflow entry. Returns the
    /// entry locked.
    /// `token` is the object whose identity `id` is (the lock-order checker tells a new object at
    /// a dead token's address from that token by it).
    @usableFromInline
    func slowLock(_ id: UInt, token: AnyObject) -> Entry {
        let index = stripeIndex(id)
        let stripe = stripes[index]
        let tid = stripe.mutex.lockInternal()
        if let entry = stripe.overflow.first(where: { $0.token == id }) {
            entry.users += 1
            stripe.mutex.unlockInternal(tid)
            entry.lock.lock()
            return entry
        }
        let checked = DiagnosticsSwitch.isOn(.lockOrder)
        if let slot = stripe.slots.first(where: { $0.token == id }) {
            // Bound to this address, but perhaps for a dead token whose address `token` reuses:
            // then, to the checker, a new lock (nobody holds the slot for the dead token: a holder
            // keeps its token alive, so the slot is free or held for `token` itself).
            let renewed = checked && slot.orderToken !== token
            if renewed {
                slot.lock.label.renewOrderIdentity()
                slot.orderToken = token
            }
            slot.waiters += 1
            stripe.mutex.unlockInternal(tid)
            if renewed { slot.lock.name = Self.orderName(id) }
            slot.lock.lock()
            stripe.mutex.withLock { slot.waiters -= 1 }
            return slot
        }
        for slot in stripe.slots where slot.waiters == 0 && slot.lock.tryLockUnheld() {
            slot.token = id
            // To the lock-order checker each token a slot serves is a new lock: orders seen for
            // an earlier token do not stick to this one (the graph's mutex is a leaf).
            if checked {
                slot.lock.label.renewOrderIdentity()
                slot.orderToken = token
            }
            stripe.mutex.unlockInternal(tid)
            if checked {
                slot.lock.name = Self.orderName(id)
                LockOrder.acquire(slot.lock.label, kind: "TKRecursiveLock")
            }
            return slot
        }
        // Every slot is held or waited for: an overflow entry, counted by its users.
        let entry = Entry(overflowStripe: index)
        entry.token = id
        entry.users = 1
        stripe.overflow.append(entry)
        stripe.mutex.unlockInternal(tid)
        entry.lock.lock()
        return entry
    }

    /// How lock-order reports name a token's lock.
    private static func orderName(_ id: UInt) -> String { "synchronized(0x\(String(id, radix: 16)))" }

    @usableFromInline
    func unlock(_ entry: Entry) {
        entry.lock.unlock()
        if let index = entry.overflowStripe { releaseOverflow(entry, stripes[index]) }
    }

    private func releaseOverflow(_ entry: Entry, _ stripe: Stripe) {
        stripe.mutex.withLock {
            entry.users -= 1
            if entry.users == 0 { stripe.overflow.removeAll { $0 === entry } }
        }
    }
}
