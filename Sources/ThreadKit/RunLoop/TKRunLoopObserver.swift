// TKRunLoopObserver and TKRunLoopActivity: CFRunLoopObserver's role. Thread-safe; the handler
// runs on the observed loop's thread. `memberships` is guarded by its own lock, taken only while
// no loop lock is held.
import Synchronization

/// The stages of a run-loop pass an observer can watch (CFRunLoopActivity's values).
public struct TKRunLoopActivity: OptionSet, Sendable, CustomStringConvertible {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    public static let entry = TKRunLoopActivity(rawValue: 1)
    public static let beforeTimers = TKRunLoopActivity(rawValue: 2)
    public static let beforeSources = TKRunLoopActivity(rawValue: 4)
    public static let beforeWaiting = TKRunLoopActivity(rawValue: 32)
    public static let afterWaiting = TKRunLoopActivity(rawValue: 64)
    public static let exit = TKRunLoopActivity(rawValue: 128)
    public static let allActivities = TKRunLoopActivity(rawValue: 0x0FFF_FFFF)

    public var description: String {
        let names: [(TKRunLoopActivity, String)] = [(.entry, "entry"), (.beforeTimers, "beforeTimers"),
            (.beforeSources, "beforeSources"), (.beforeWaiting, "beforeWaiting"), (.afterWaiting, "afterWaiting"), (.exit, "exit")]
        let present = names.filter { contains($0.0) }.map(\.1)
        return present.isEmpty ? "[]" : present.joined(separator: "|")
    }
}

/// Watches a loop's passes. Observers in a mode run in `order`; a non-repeating observer is
/// invalidated after its first call.
public final class TKRunLoopObserver: @unchecked Sendable {
    public let activities: TKRunLoopActivity
    public let repeats: Bool
    public let order: Int
    let handler: @Sendable (TKRunLoopObserver, TKRunLoopActivity) -> Void

    private let valid = Atomic<Bool>(true)
    let memberships = Protected<[RunLoopMembership]>([])

    public init(activities: TKRunLoopActivity, repeats: Bool = true, order: Int = 0,
                handler: @escaping @Sendable (TKRunLoopObserver, TKRunLoopActivity) -> Void) {
        self.activities = activities
        self.repeats = repeats
        self.order = order
        self.handler = handler
    }

    /// Removes the observer from every loop and mode; it is never called again.
    public func invalidate() {
        guard valid.exchange(false, ordering: .acquiringAndReleasing) else { return }
        for membership in memberships.withLock({ list in defer { list.removeAll() }; return list }) {
            membership.loop?.detach(self, from: membership.mode)
        }
    }

    public var isValid: Bool { valid.load(ordering: .acquiring) }
}
