// TKNotificationCenter: NSNotificationCenter's block-based observers. Thread-safe.
// `registry` (the observers by name, in registration order) is guarded by its Protected lock,
// which is never held while an observer's block runs: `post` snapshots the matching observers
// under the lock and calls them after releasing it. Each observation carries an atomic `active`
// flag that removeObserver clears, so once removeObserver has returned no call of that block
// starts (a call already running on another thread may finish). An observer with a queue runs
// inline when the post is made on that queue (TKOperationQueue.current, which is `.main` on the
// main thread outside operations); otherwise it gets an operation per matching post, which checks
// the flag again when it runs, and the posting thread waits (parked) until that operation finished:
// posting is synchronous for every observer, as Apple's is.
import Synchronization

// safety: the registry is a `Protected`; nothing else is stored.
/// Delivers notifications to the observers registered for their name and/or sender.
public final class TKNotificationCenter: @unchecked Sendable {
    /// The process's shared center (`NotificationCenter.default`), where ThreadKit itself posts
    /// (`TKThread.willExitNotification`, `TKPort.didBecomeInvalidNotification`, …).
    public static let `default` = TKNotificationCenter()

    private struct Registry {
        /// Observers of one name, and observers of every name (name nil), each in registration order.
        var byName: [TKNotification.Name: [TKObservationToken]] = [:]
        var anyName: [TKObservationToken] = []
        var nextSequence: UInt64 = 0
    }

    private let registry = Protected(Registry())

    /// Creates a center of its own with no observers; notifications posted to it reach only its observers.
    public init() {}

    /// Registers `block` for notifications named `name` (nil: every name) from `object` (nil: every
    /// sender; otherwise matched by identity, and never again once that object is gone). The
    /// observer lives until `removeObserver`. The block runs synchronously on the posting thread.
    @discardableResult
    public func addObserver(
        forName name: TKNotification.Name?, object: AnyObject?,
        using block: @escaping @Sendable (TKNotification) -> Void
    ) -> TKObservationToken {
        addObserver(forName: name, object: object, queue: nil, using: block)
    }

    /// As above; with a `queue`, the block runs on that queue (`.main`: on the main thread) and
    /// `post` still returns only after it ran, as Apple's: inline when the post is made on that
    /// queue (from one of its operations, or on the main thread for `.main`), so a serial queue's
    /// operation can post to its own observers without deadlock; otherwise as an operation added
    /// to that queue, which the posting thread waits for. An operation that starts after
    /// `removeObserver` returned does not call the block.
    @discardableResult
    public func addObserver(
        forName name: TKNotification.Name?, object: AnyObject?, queue: TKOperationQueue?,
        using block: @escaping @Sendable (TKNotification) -> Void
    ) -> TKObservationToken {
        registry.withLock { r in
            let token = TKObservationToken(
                center: self, name: name, object: object, sequence: r.nextSequence, queue: queue,
                block: block)
            r.nextSequence += 1
            if let name { r.byName[name, default: []].append(token) } else { r.anyName.append(token) }
            return token
        }
    }

    /// Unregisters the observer. After this returns its block is not started again. Removing twice,
    /// or a token of another center, does nothing.
    public func removeObserver(_ token: TKObservationToken) {
        guard token.center === self, token.active.exchange(false, ordering: .acquiringAndReleasing) else { return }
        registry.withLock { r in
            if let name = token.name {
                r.byName[name]?.removeAll { $0 === token }
                if r.byName[name]?.isEmpty == true { r.byName[name] = nil }
            } else {
                r.anyName.removeAll { $0 === token }
            }
        }
    }

    /// Delivers `notification` to every matching observer, in registration order, and returns
    /// when all have run: on this thread, or, for an observer with a queue that is not the current
    /// one, as an operation on that queue that this thread waits for (a ThreadKit wait).
    public func post(_ notification: TKNotification) {
        let matching = registry.withLock { r -> [TKObservationToken] in
            let named = r.byName[notification.name] ?? []
            if r.anyName.isEmpty { return named }
            if named.isEmpty { return r.anyName }
            return (named + r.anyName).sorted { $0.sequence < $1.sequence }
        }
        for token in matching where token.matches(notification.object) {
            // Observers removed meanwhile (by an earlier observer of this post, or another thread)
            // are skipped.
            guard token.active.load(ordering: .acquiring) else { continue }
            if let queue = token.queue, queue !== TKOperationQueue.current {
                let delivery = TKBlockOperation { if token.active.load(ordering: .acquiring) { token.block(notification) } }
                queue.addOperation(delivery)
                delivery.waitUntilFinished()
            } else {
                token.block(notification)
            }
        }
    }

    /// Makes a notification from `name`, `object` and `userInfo` and posts it, as ``post(_:)``:
    /// synchronously, returning after every matching observer's block has run.
    public func post(name: TKNotification.Name, object: AnyObject? = nil, userInfo: [String: any Sendable]? = nil) {
        post(TKNotification(name: name, object: object, userInfo: userInfo))
    }

    /// The number of registered observers (tests).
    var observerCount: Int {
        registry.withLock { r in r.anyName.count + r.byName.values.reduce(0) { $0 + $1.count } }
    }
}

// safety: immutable after init except `active` (atomic); the weak references load safely
// from any thread.
/// The handle of one registration; equal only to itself. Keep it to remove the observer.
public final class TKObservationToken: Hashable, @unchecked Sendable {
    fileprivate weak var center: TKNotificationCenter?
    fileprivate let name: TKNotification.Name?
    /// The sender to match, held weakly: once it is gone the observer matches nothing.
    private weak var object: AnyObject?
    private let matchesAnyObject: Bool
    fileprivate let sequence: UInt64
    fileprivate let block: @Sendable (TKNotification) -> Void
    /// Where the block runs: nil, in `post` on the posting thread; else on this queue (inline when
    /// posted from it), with `post` waiting for it.
    fileprivate let queue: TKOperationQueue?
    /// Cleared by removeObserver; checked right before each call.
    fileprivate let active = Atomic<Bool>(true)

    fileprivate init(
        center: TKNotificationCenter, name: TKNotification.Name?, object: AnyObject?, sequence: UInt64,
        queue: TKOperationQueue?, block: @escaping @Sendable (TKNotification) -> Void
    ) {
        self.center = center
        self.queue = queue
        self.name = name
        self.object = object
        matchesAnyObject = object == nil
        self.sequence = sequence
        self.block = block
    }

    fileprivate func matches(_ sender: AnyObject?) -> Bool {
        if matchesAnyObject { return true }
        guard let object, let sender else { return false }
        return object === sender
    }

    /// Tokens are equal only when they are the same object (the same registration).
    public static func == (lhs: TKObservationToken, rhs: TKObservationToken) -> Bool { lhs === rhs }
    /// Hashes the token's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
