// TKNotificationQueue: NSNotificationQueue. Holds notifications until a point of its owning
// thread's run loop, merges matching ones on enqueue, and posts them through its center in the
// order they were enqueued.
//
// What it owns and who touches it:
//   - `state` (a Protected, a leaf lock): the queued entries in enqueue order, the hook (observer)
//     and the modes it has been added to, the `aboutToWait` flag. enqueue/dequeue take it on any
//     thread; the hook takes it on the owner thread. It is never held while a notification is
//     posted or while a run-loop call is made (the loop's lock is always taken with it released).
//   - `loop` (weak) and `ownerThread`: fixed at init (the creating thread's TKRunLoop.current).
//   - The hook: one TKRunLoopObserver on the owner loop, created on the first queued enqueue and
//     added to each mode a queued notification names (`.common` as `.common`, so the loop expands
//     it, also to common modes added later). Its handler runs on the owner thread and is the only
//     place queued notifications are posted. Observers do not keep a mode alive: the loop must
//     have a source, timer or port in the mode to run it at all.
//
// When queued notifications post (the pass is docs/RunLoopIteration.md's):
//   - `.asap` at the first of: beforeWaiting (the pass is about to sleep), beforeTimers (the start
//     of the next pass, i.e. the end of the current one) or exit (the run ends). Enqueued during a
//     pass, it posts when that pass ends — before the loop sleeps, or as the next pass starts if
//     this one does not sleep (a handled source, a deadline); enqueued while the loop is not
//     running, at the start of the next run's first pass. Never synchronously.
//   - `.whenIdle` at beforeWaiting only: a pass that polls (it handled a source) is not idle.
//   - At beforeWaiting the due `.asap` ones post first, then the `.whenIdle` ones; within a style,
//     always in enqueue order (Foundation on Linux posts them in reverse).
//   - Only in the notification's modes (`.common` matching whichever modes the loop holds in its
//     common set at that moment).
//   - If, once the beforeWaiting posts are done, due notifications are queued again (an observer
//     enqueued them, or a later beforeWaiting observer of the loop did), the loop is woken so that
//     it does not sleep on them: a `.whenIdle` notification that re-enqueues itself therefore
//     posts once per pass, like a perform block that re-performs itself.
//
// Lifetime: while notifications are queued and the owner loop lives, the hook keeps the queue
// alive (the loop holds the hook), so a queue dropped with queued notifications still posts
// them: a notification enqueued is posted or explicitly dequeued. An empty queue is held by its
// users only and removes its hook when it goes. When the owner thread has finished (its loop is
// gone), queued styles can no longer post: what is queued then stays until dequeued.

// safety: the queued notifications are in a `Protected`; the rest is immutable (`loop` is a weak
// reference, safe to load from any thread).
/// Queues notifications for a thread's run loop (NSNotificationQueue). Thread-safe; a queue
/// belongs to the thread that created it and posts its queued notifications on that thread.
public final class TKNotificationQueue: @unchecked Sendable {
    /// When a notification is posted.
    public enum PostingStyle: Sendable {
        /// When the owner loop is about to wait (it has nothing else to do).
        case whenIdle
        /// At the end of the owner loop's current pass (or its next pass if it is not running).
        case asap
        /// At once, on the calling thread, after coalescing, if that thread's loop is not running
        /// or runs one of the notification's modes (otherwise not at all, as in Foundation).
        case now
    }

    /// What makes two notifications match, for coalescing and dequeuing. `[]` matches nothing.
    public struct Coalescing: OptionSet, Sendable {
        /// The bits of the set: `onName` is 1, `onSender` 2.
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Same name.
        public static let onName = Coalescing(rawValue: 1 << 0)
        /// Same sender (`object`, by identity; two nil senders are the same).
        public static let onSender = Coalescing(rawValue: 1 << 1)
    }

    /// One queued notification.
    private struct Entry {
        let notification: TKNotification
        /// `.asap` or `.whenIdle`.
        var style: PostingStyle
        /// Never empty.
        var modes: [TKRunLoop.Mode]
    }

    private struct State {
        /// Queued notifications in enqueue order.
        var pending: [Entry] = []
        /// The hook on the owner loop; alive as long as its observer (the loop holds that).
        weak var hook: Hook?
        /// The modes the hook's observer has been added to.
        var observedModes: Set<TKRunLoop.Mode> = []
        /// The hook ran at beforeWaiting and the loop has not woken since: an owner-thread enqueue
        /// must wake it (the loop would otherwise sleep on it).
        var aboutToWait = false
    }

    private let center: TKNotificationCenter
    private weak var loop: TKRunLoop?
    private let ownerThread: UInt32
    private let state = Protected(State())

    /// The calling thread's queue, bound to `TKNotificationCenter.default`; created on first use
    /// and released with the thread.
    public static var `default`: TKNotificationQueue {
        if let queue = perThread.value { return queue }
        let queue = TKNotificationQueue(notificationCenter: .default)
        perThread.value = queue
        return queue
    }

    private static let perThread = TKThreadLocal<TKNotificationQueue>()

    /// A queue posting through `notificationCenter`, owned by the calling thread: queued
    /// notifications post on this thread's run loop.
    public init(notificationCenter: TKNotificationCenter) {
        center = notificationCenter
        let loop = TKRunLoop.current
        self.loop = loop
        ownerThread = loop.ownerThread
    }

    deinit {
        // Only an empty queue (or one whose loop is gone) goes away: a queued notification keeps it.
        state.withLock { $0.hook?.observer }?.invalidate()
    }

    // MARK: Enqueue and dequeue

    /// Queues `notification` (or, with `.now`, posts it at once on the calling thread).
    ///
    /// Coalescing: if a queued notification matches under `coalesceMask`, the new one is merged
    /// into it and not queued: the queued one keeps its place and contents, and from then on also
    /// posts in `modes` and, if the new one was `.asap`, as soon as `.asap` would. With `.now`
    /// the matching queued ones are removed and `notification` is posted. `[]`: no coalescing.
    ///
    /// `modes` (nil or empty: `[.default]`) are the modes of the owner loop in which a queued
    /// notification may post. `.now`, as Foundation's: posts only if the calling thread's loop is
    /// not running or runs one of `modes` now (`.common`: any of its common modes); otherwise it is
    /// not posted (the matching queued ones are still removed). Any thread; from another thread
    /// the owner loop is woken.
    public func enqueue(
        _ notification: TKNotification, postingStyle: PostingStyle,
        coalesceMask: Coalescing = [.onName, .onSender], forModes modes: [TKRunLoop.Mode]? = nil
    ) {
        var wanted: [TKRunLoop.Mode] = []
        for mode in modes ?? [] where !wanted.contains(mode) { wanted.append(mode) }
        if wanted.isEmpty { wanted = [.default] }
        if postingStyle == .now {
            let released = state.withLock { s in
                s.pending.removeAll { Self.matches($0.notification, notification, coalesceMask) }
                return releaseIfEmpty(&s)
            }
            withExtendedLifetime(released) {}
            if Self.callingLoopAccepts(wanted) { center.post(notification) }
            return
        }
        let loop = self.loop
        let onOwner = SystemCall.currentThreadID == ownerThread
        let (observer, newModes, wake) = state.withLock { s -> (TKRunLoopObserver?, [TKRunLoop.Mode], Bool) in
            if let index = s.pending.firstIndex(where: { Self.matches($0.notification, notification, coalesceMask) }) {
                if postingStyle == .asap { s.pending[index].style = .asap }
                for mode in wanted where !s.pending[index].modes.contains(mode) { s.pending[index].modes.append(mode) }
            } else {
                s.pending.append(Entry(notification: notification, style: postingStyle, modes: wanted))
            }
            guard loop != nil else { return (nil, [], false) } // the owner thread has finished
            let hook: Hook
            let observer: TKRunLoopObserver
            if let existing = s.hook, let existingObserver = existing.observer {
                (hook, observer) = (existing, existingObserver)
            } else {
                (hook, observer) = makeHook()
                s.hook = hook
                s.observedModes = []
            }
            hook.retained = self
            let newModes = wanted.filter { s.observedModes.insert($0).inserted }
            return (observer, newModes, !onOwner || s.aboutToWait)
        }
        guard let loop, let observer else { return }
        for mode in newModes { loop.add(observer, forMode: mode) }
        if wake { loop.wakeUp() }
    }

    /// Removes the queued notifications that match `notification` under `coalesceMask` (`[]`
    /// matches nothing). Any thread.
    public func dequeueNotifications(matching notification: TKNotification, coalesceMask: Coalescing) {
        let released = state.withLock { s in
            s.pending.removeAll { Self.matches($0.notification, notification, coalesceMask) }
            return releaseIfEmpty(&s)
        }
        withExtendedLifetime(released) {}
    }

    /// Whether a `.now` notification for `modes` posts: the calling thread's loop is not running,
    /// or runs one of them (NSNotificationQueue checks the current loop's current mode).
    private static func callingLoopAccepts(_ modes: [TKRunLoop.Mode]) -> Bool {
        guard let loop = TKRunLoop.currentIfMade, let mode = loop.currentMode else { return true }
        return modes.contains(mode) || (modes.contains(.common) && loop.notificationQueueIsCommon(mode))
    }

    /// Whether `a` and `b` match under `mask`; an empty mask matches nothing.
    private static func matches(_ a: TKNotification, _ b: TKNotification, _ mask: Coalescing) -> Bool {
        if mask.isEmpty { return false }
        if mask.contains(.onName) && a.name != b.name { return false }
        if mask.contains(.onSender) && a.object !== b.object { return false }
        return true
    }

    /// With nothing queued, the hook stops keeping the queue alive. Returns that reference so the
    /// caller drops it after the lock is released. Caller holds the state lock.
    private func releaseIfEmpty(_ s: inout State) -> TKNotificationQueue? {
        guard s.pending.isEmpty, let hook = s.hook else { return nil }
        defer { hook.retained = nil }
        return hook.retained
    }

    // MARK: The hook

    // safety: the weak references load safely from any thread; `retained` is touched only under the
    // queue's state lock.
    /// The link from the owner loop's observer back to the queue. Owned by the observer's handler.
    private final class Hook: @unchecked Sendable {
        weak var queue: TKNotificationQueue?
        weak var observer: TKRunLoopObserver?
        /// The queue itself while it holds notifications (guarded by the queue's state lock).
        var retained: TKNotificationQueue?
        init(queue: TKNotificationQueue) { self.queue = queue }
    }

    /// A new hook and its observer (not yet added to any mode). Caller holds the state lock.
    private func makeHook() -> (Hook, TKRunLoopObserver) {
        let hook = Hook(queue: self)
        let observer = TKRunLoopObserver(activities: [.entry, .beforeTimers, .beforeWaiting, .afterWaiting, .exit]) { _, activity in
            hook.queue?.loopReached(activity)
        }
        hook.observer = observer
        return (hook, observer)
    }

    /// The owner loop reached `activity` in a mode the hook is in. Owner thread.
    private func loopReached(_ activity: TKRunLoopActivity) {
        guard let loop else { return }
        if activity == .entry || activity == .afterWaiting {
            state.withLock { $0.aboutToWait = false }
            return
        }
        let idle = activity == .beforeWaiting
        let anyQueued = state.withLock { s in
            // At beforeWaiting with nothing queued the loop is about to sleep at once.
            s.aboutToWait = idle && s.pending.isEmpty
            return !s.pending.isEmpty
        }
        guard anyQueued, let mode = loop.currentMode else { return }
        let modeIsCommon = loop.notificationQueueIsCommon(mode)
        func eligible(_ entry: Entry) -> Bool {
            entry.modes.contains(mode) || (modeIsCommon && entry.modes.contains(.common))
        }
        var released: TKNotificationQueue?
        let due = state.withLock { s -> [TKNotification] in
            var asap: [TKNotification] = []
            var whenIdle: [TKNotification] = []
            var rest: [Entry] = []
            for entry in s.pending {
                if eligible(entry) && entry.style == .asap {
                    asap.append(entry.notification)
                } else if idle && eligible(entry) {
                    whenIdle.append(entry.notification)
                } else {
                    rest.append(entry)
                }
            }
            if asap.isEmpty && whenIdle.isEmpty { return [] }
            s.pending = rest
            released = releaseIfEmpty(&s)
            return asap + whenIdle
        }
        for notification in due { center.post(notification) }
        withExtendedLifetime(released) {}
        guard idle else { return }
        let dueAgain = state.withLock { s in
            s.aboutToWait = true
            return s.pending.contains(where: eligible)
        }
        if dueAgain { loop.wakeUp() }
    }
}

extension TKRunLoop {
    /// Whether `mode` is in this loop's common-mode set now.
    fileprivate func notificationQueueIsCommon(_ mode: Mode) -> Bool {
        lock.withLock { isCommonLocked(mode) }
    }
}
