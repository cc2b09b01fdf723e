// TKRunLoopObserver and TKRunLoopActivity: CFRunLoopObserver's role. Thread-safe; the handler
// runs on the observed loop's thread. `memberships` is guarded by its own lock, taken only while
// no loop lock is held.
import Synchronization

/// The stages of a run-loop pass an observer can watch (CFRunLoopActivity's values).
public struct TKRunLoopActivity: OptionSet, Sendable, CustomStringConvertible {
    /// The activities' bits: CFRunLoopActivity's values (`entry` 1 through `exit` 128).
    public let rawValue: UInt
    /// The set with the bits of `rawValue` (CFRunLoopActivity's values).
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// A run call begins, before its first pass (kCFRunLoopEntry): once per `run…` call. A run
    /// of a mode with nothing in it returns `.finished` at once and notifies nothing.
    public static let entry = TKRunLoopActivity(rawValue: 1)
    /// A pass begins (kCFRunLoopBeforeTimers). As in CFRunLoop, due timers fire later in the
    /// pass, after the loop wakes.
    public static let beforeTimers = TKRunLoopActivity(rawValue: 2)
    /// Each pass, before its perform blocks and signalled version-0 sources run
    /// (kCFRunLoopBeforeSources).
    public static let beforeSources = TKRunLoopActivity(rawValue: 4)
    /// The loop is about to sleep (kCFRunLoopBeforeWaiting): the place to flush work batched
    /// during the pass. Skipped, with `afterWaiting`, by a pass that handled a source or reached
    /// its deadline, which polls instead of sleeping.
    public static let beforeWaiting = TKRunLoopActivity(rawValue: 32)
    /// The loop woke from its sleep, before it handles what woke it (kCFRunLoopAfterWaiting).
    /// Always follows a `beforeWaiting` of the same pass.
    public static let afterWaiting = TKRunLoopActivity(rawValue: 64)
    /// A run call returns, after its last pass (kCFRunLoopExit): once per run call that notified
    /// `entry`, whatever its result.
    public static let exit = TKRunLoopActivity(rawValue: 128)
    /// Every activity (kCFRunLoopAllActivities, 0x0FFFFFFF).
    public static let allActivities = TKRunLoopActivity(rawValue: 0x0FFF_FFFF)

    /// The activities' names joined by `|`, e.g. `beforeWaiting|afterWaiting`; `[]` for none.
    public var description: String {
        let names: [(TKRunLoopActivity, String)] = [
            (.entry, "entry"), (.beforeTimers, "beforeTimers"),
            (.beforeSources, "beforeSources"), (.beforeWaiting, "beforeWaiting"), (.afterWaiting, "afterWaiting"), (.exit, "exit"),
        ]
        let present = names.filter { contains($0.0) }.map(\.1)
        return present.isEmpty ? "[]" : present.joined(separator: "|")
    }
}

// safety: immutable apart from `valid` (atomic) and `memberships` (`Protected`).
/// Watches a loop's passes. Observers in a mode run in `order`; a non-repeating observer is
/// invalidated after its first call.
public final class TKRunLoopObserver: @unchecked Sendable {
    /// The activities the handler is called for (CFRunLoopObserverGetActivities). Fixed at
    /// creation.
    public let activities: TKRunLoopActivity
    /// Whether the observer stays after its first call (CFRunLoopObserverDoesRepeat). A
    /// non-repeating observer is invalidated as soon as its handler returns the first time.
    public let repeats: Bool
    /// Where the observer runs among a mode's observers of one activity: lower first, equal
    /// orders in the order they were added (CFRunLoopObserverGetOrder). Fixed at creation.
    public let order: Int
    let handler: @Sendable (TKRunLoopObserver, TKRunLoopActivity) -> Void

    private let valid = Atomic<Bool>(true)
    let memberships = Protected<[RunLoopMembership]>([])

    /// Creates an observer that calls `handler` with itself and the activity at each of
    /// `activities` (CFRunLoopObserverCreateWithHandler). It observes nothing until added to a
    /// loop with `TKRunLoop.add(_:forMode:)`, which keeps it while it is in one of the loop's modes.
    ///
    /// The handler runs on the loop's thread, during passes of the modes it was added to, with no
    /// loop lock held: it may add and remove run-loop items and invalidate observers. An observer
    /// watches one loop at a time: adding it to a second loop while it is still in a mode of the
    /// first stops the process with a message naming both loops' threads.
    public init(
        activities: TKRunLoopActivity, repeats: Bool = true, order: Int = 0,
        handler: @escaping @Sendable (TKRunLoopObserver, TKRunLoopActivity) -> Void
    ) {
        self.activities = activities
        self.repeats = repeats
        self.order = order
        self.handler = handler
    }

    /// Removes the observer from every loop and mode; it is never called again.
    public func invalidate() {
        guard valid.exchange(false, ordering: .acquiringAndReleasing) else { return }
        for membership in memberships.withLock({ list in
            defer { list.removeAll() }
            return list
        }) {
            membership.loop?.detach(self, from: membership.mode)
        }
    }

    /// False once `invalidate()` was called or a non-repeating observer ran
    /// (CFRunLoopObserverIsValid). An invalid observer is never called again and adding it to a
    /// loop does nothing. Thread-safe.
    public var isValid: Bool { valid.load(ordering: .acquiring) }
}
