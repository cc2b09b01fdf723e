// synchronized(token): @synchronized for Swift. A recursive lock per token identity, taken from a
// striped table when a thread first needs it and given back when no thread holds or waits for it,
// so the table never holds more entries than tokens in use at once (plus a few spare slots).
// Thread-safe.
//
// Lock order: a stripe's mutex is taken only to look up or release an entry (under it only the
// lock-order graph's mutex, a leaf, may be taken), never while
// waiting for an entry's lock.

/// Runs `body` holding a recursive lock that belongs to `token`'s identity, as Objective-C's
/// `@synchronized(token)`. Threads using different tokens do not block each other; the same
/// thread may nest on the same token. The lock is released however `body` exits, including by a
/// thrown error.
public func synchronized<T>(_ token: AnyObject, _ body: () throws -> T) rethrows -> T {
    let entry = SyncTable.shared.acquire(ObjectIdentifier(token))
    entry.lock.lock()
    defer {
        entry.lock.unlock()
        SyncTable.shared.release(entry)
    }
    return try body()
}

/// The table of per-token locks, split into stripes so unrelated tokens rarely share a table lock.
/// Each stripe is a short list of slots scanned linearly (a stripe rarely has more than one or two
/// tokens in use), so a lookup costs no hashing and, once a slot exists, no allocation. A slot
/// belongs to a token while its `users` count (threads holding or waiting for its lock) is above
/// zero; the caller keeps the token alive for that whole time, so its identity cannot be reused.
final class SyncTable: @unchecked Sendable {
    static let shared = SyncTable()

    final class Entry: @unchecked Sendable {
        let lock = TKRecursiveLock()
        fileprivate unowned let stripe: Stripe
        fileprivate var token: ObjectIdentifier?   // guarded by the stripe's mutex; nil: free slot
        fileprivate var users = 0                  // guarded by the stripe's mutex
        fileprivate init(_ stripe: Stripe) { self.stripe = stripe }
    }

    fileprivate final class Stripe: @unchecked Sendable {
        let mutex = RawMutex()
        var slots: [Entry] = []   // guarded by `mutex`
        deinit { mutex.deallocate() }
    }

    /// Free slots kept per stripe beyond those in use; more are dropped when released.
    private static let spareSlots = 4
    private let stripes: [Stripe] = (0..<64).map { _ in Stripe() }

    /// How many tokens currently hold a slot (for tests: the table must not grow without bound).
    var count: Int {
        stripes.reduce(0) { total, stripe in total + stripe.mutex.withLock { stripe.slots.filter { $0.token != nil }.count } }
    }

    /// How many slots exist, used or spare.
    var capacity: Int {
        stripes.reduce(0) { total, stripe in total + stripe.mutex.withLock { stripe.slots.count } }
    }

    func acquire(_ id: ObjectIdentifier) -> Entry {
        // Objects are 16-byte aligned: drop the low bits before picking a stripe.
        let stripe = stripes[Int((UInt(bitPattern: id) >> 4) & 63)]
        return stripe.mutex.withLock {
            var free: Entry?
            for slot in stripe.slots {
                if slot.token == id {
                    slot.users += 1
                    return slot
                }
                if free == nil && slot.token == nil { free = slot }
            }
            let entry = free ?? Entry(stripe)
            if free == nil { stripe.slots.append(entry) }
            entry.token = id
            entry.users = 1
            // A slot serves one token at a time: to the lock-order checker each token it serves is
            // a new lock (docs/Diagnostics.md §1), so orders seen for an earlier token do not stick.
            entry.lock.label.renewOrderIdentity()
            if DiagnosticsSwitch.isOn(.lockOrder) { entry.lock.name = "synchronized(\(id))" }
            return entry
        }
    }

    func release(_ entry: Entry) {
        let stripe = entry.stripe
        stripe.mutex.withLock {
            entry.users -= 1
            guard entry.users == 0 else { return }
            entry.token = nil
            var spare = 0
            for slot in stripe.slots where slot.token == nil { spare += 1 }
            if spare > SyncTable.spareSlots { stripe.slots.removeAll { $0 === entry } }
        }
    }
}
