// synchronized(token): @synchronized for Swift. A recursive lock per token identity, created on
// first use and removed when no thread holds or waits for it, so the table never grows beyond the
// tokens in use. Thread-safe.
//
// Lock order: a stripe's mutex is a leaf taken only to look up or release an entry, never while
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
        SyncTable.shared.release(ObjectIdentifier(token), entry)
    }
    return try body()
}

/// The table of per-token locks, split into stripes so unrelated tokens rarely share a table lock.
/// An entry lives while its `users` count (threads holding or waiting for its lock) is above zero;
/// the token is kept alive by the caller for that whole time, so its identity cannot be reused.
final class SyncTable: @unchecked Sendable {
    static let shared = SyncTable()

    final class Entry: @unchecked Sendable {
        let lock = TKRecursiveLock()
        var users = 0   // guarded by the stripe's mutex
    }

    private final class Stripe: @unchecked Sendable {
        let mutex = RawMutex()
        var entries: [ObjectIdentifier: Entry] = [:]   // guarded by `mutex`
        /// Unlocked entries kept for reuse, so a token's first use does not allocate. At most
        /// `spareLimit`; guarded by `mutex`.
        var spare: [Entry] = []
    }

    private let stripes: [Stripe] = (0..<64).map { _ in Stripe() }
    private static let spareLimit = 4

    /// How many tokens currently have an entry (for tests: the table must not grow without bound).
    var count: Int {
        stripes.reduce(0) { total, stripe in total + withStripe(stripe) { stripe.entries.count } }
    }

    func acquire(_ id: ObjectIdentifier) -> Entry {
        let stripe = stripeFor(id)
        return withStripe(stripe) {
            let entry = stripe.entries[id] ?? stripe.spare.popLast() ?? Entry()
            stripe.entries[id] = entry
            entry.users += 1
            return entry
        }
    }

    func release(_ id: ObjectIdentifier, _ entry: Entry) {
        let stripe = stripeFor(id)
        withStripe(stripe) {
            entry.users -= 1
            if entry.users == 0 {
                stripe.entries[id] = nil
                if stripe.spare.count < SyncTable.spareLimit { stripe.spare.append(entry) }
            }
        }
    }

    private func stripeFor(_ id: ObjectIdentifier) -> Stripe {
        // Objects are 16-byte aligned: drop the low bits before picking a stripe.
        stripes[Int((UInt(bitPattern: id) >> 4) & 63)]
    }

    private func withStripe<T>(_ stripe: Stripe, _ body: () -> T) -> T {
        stripe.mutex.withLock(body)
    }
}
