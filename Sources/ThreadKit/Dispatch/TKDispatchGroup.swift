// TKDispatchGroup: DispatchGroup (SPEC §6). Thread-safe. `state` is the one word enter and leave
// touch; `generation` is the futex word waiters park on; `notifyLock` guards `notifications` and
// the `finishWaiters` pointer (the tasks awaiting `finished()`, docs/Concurrency.md §4: made by the
// first of them, kept). Lock order: notifyLock and the waiters' mutex are never held together.

import Synchronization

// safety: the count and flags are one atomic word; notifications and waiters are touched only
// under `notifyLock`.
/// A count of unfinished tasks plus two "maybe" flags:
///
/// | bits   | meaning                                                              |
/// |--------|----------------------------------------------------------------------|
/// | 0–31   | the count: `enter()` minus `leave()`                                  |
/// | 32     | `hasWaiters`: a thread may be parked in `wait` (cleared only at zero)  |
/// | 33     | `hasNotify`: the notification list or `finishWaiters` may be non-empty |
///
/// While the count is above zero the group holds a strong reference to itself (taken by the enter
/// that raises it from zero, dropped by the leave that brings it back), as libdispatch's groups do:
/// a block submitted with `async(group:)` can then hold its group unretained (`DispatchEntry.group`),
/// and a group dropped by its owner while tasks are out lives until the last of them leaves. A
/// group entered and never left is therefore never freed (it could never be waited for either).
///
/// enter is one fetch-add; leave is one fetch-sub and, only when it brings the count to zero with
/// a flag set, the slow path: bump `generation` (every waiter returns once it sees the generation
/// move: a wait ends at a zero crossing even if the count rises again at once) and submit the
/// notifications. The flags are "maybe" bits: clearing them is a CAS from exactly "count 0 + flags",
/// so a flag set by a concurrent waiter for the next round is never lost.
public final class TKDispatchGroup: @unchecked Sendable {
    private static let countMask: UInt64 = 0xFFFF_FFFF
    private static let hasWaiters: UInt64 = 1 << 32
    private static let hasNotify: UInt64 = 1 << 33

    private let state = Atomic<UInt64>(0)
    private let generation = FutexWord(0)
    /// The thread that entered last, for thread dumps (docs/Diagnostics.md §6): stored only while
    /// waits are recorded. Relaxed: a hint, read by a dumping thread.
    private let lastEnterer = Atomic<UInt32>(0)
    private let notifyLock = DispatchLock()
    private var notifications: [(TKDispatchQueue, @Sendable () -> Void)] = [] // guarded by notifyLock
    private var finishWaiters: AsyncWaiters<Void>? // guarded by notifyLock

    /// Creates a group with a count of zero, like `DispatchGroup()`.
    public init() {}

    deinit {
        // A group whose count is above zero holds itself: it is freed only at zero.
        assert(state.load(ordering: .relaxed) & TKDispatchGroup.countMask == 0, "TKDispatchGroup freed while entered")
    }

    /// One more unfinished task. Sequentially consistent, like every access to `state`: pairs with
    /// the waiter's flag-and-check (Dekker's pattern between `state` and `generation`).
    public func enter() {
        if DiagnosticsSwitch.isOn(WaitGraph.recording) { lastEnterer.store(SystemCall.currentThreadID, ordering: .relaxed) }
        let old = state.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        let count = old & TKDispatchGroup.countMask
        if count == 0 {
            // The self-reference for the time the count is above zero. Taken after the add: the
            // caller's own reference keeps the group alive until then, and the leave that brings
            // this count back to zero happens after this enter returns.
            _ = Unmanaged.passUnretained(self).retain()
        } else if count == TKDispatchGroup.countMask {
            misuse("TKDispatchGroup.enter(): more than 2^32-1 tasks entered and not left. Fix: balance enter() with leave().")
        }
    }

    /// One task finished. More `leave()` than `enter()` is a misuse that stops the process.
    public func leave() {
        // The caller holds a reference, so dropping the self-reference here cannot free the group
        // under this method.
        if leaveReachingZero() { Unmanaged.passUnretained(self).release() }
    }

    /// Every leave: the public `leave()`, and the end of a block submitted with `async(group:)`
    /// (whose entry holds the group unretained). Returns true when it brought the count to zero:
    /// the caller then drops the group's self-reference (`Unmanaged.release`), after this method
    /// has returned, since that release may free the group.
    func leaveReachingZero() -> Bool {
        let old = state.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue
        let count = old & TKDispatchGroup.countMask
        if count == 1 {
            if old & ~TKDispatchGroup.countMask != 0 { reachedZero() }
            return true
        } else if count == 0 {
            misuse(
                "TKDispatchGroup.leave() called more times than enter() (the group's count is 0): "
                    + "an unbalanced leave. Fix: call leave() exactly once for each enter(), and do not leave a "
                    + "group that async(group:) entered for you.")
        }
        return false
    }

    /// The count reached zero with a flag set: wake the waiters and submit the notifications.
    private func reachedZero() {
        // Clear the flags if nobody entered meanwhile; otherwise they stay set for the next zero.
        var current = state.load(ordering: .sequentiallyConsistent)
        while current & TKDispatchGroup.countMask == 0 && current != 0 {
            let (exchanged, original) = state.compareExchange(expected: current, desired: 0, ordering: .sequentiallyConsistent)
            if exchanged { break }
            current = original
        }
        generation.pointer.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        Parking.unparkAll(generation)
        let (due, waiters) = notifyLock.withLock { () -> ([(TKDispatchQueue, @Sendable () -> Void)], AsyncWaiters<Void>?) in
            defer { notifications.removeAll() }
            return (notifications, finishWaiters)
        }
        waiters?.resumeAll(returning: ())
        for (queue, work) in due { queue.async(execute: work) }
    }

    /// Waits until the count is zero (or has crossed zero since the call began).
    public func wait() {
        let waiting = WaitGraph.begin(self, .group, "TKDispatchGroup.wait()") // who waits for whom (§6)
        _ = wait(deadline: nil)
        WaitGraph.end(waiting)
    }

    /// As `wait()`, giving up at `deadline` (never early).
    public func wait(until deadline: ContinuousClock.Instant) -> TKDispatchTimeoutResult {
        let waiting = WaitGraph.begin(self, .group, "TKDispatchGroup.wait(until:)") // who waits for whom (§6)
        defer { WaitGraph.end(waiting) }
        return wait(deadline: deadline) ? .success : .timedOut
    }

    private func wait(deadline: ContinuousClock.Instant?) -> Bool {
        if state.load(ordering: .sequentiallyConsistent) & TKDispatchGroup.countMask == 0 { return true }
        let seen = generation.pointer.pointee.load(ordering: .sequentiallyConsistent)
        // Announce a waiter, then check the count: a leave that reaches zero after this sees the flag.
        let s = state.bitwiseOr(TKDispatchGroup.hasWaiters, ordering: .sequentiallyConsistent).oldValue
        if s & TKDispatchGroup.countMask == 0 { return true }
        var spin = SpinWait(limit: DispatchSpin.longWait)
        while generation.pointer.pointee.load(ordering: .sequentiallyConsistent) == seen {
            if spin.spin() { continue }
            if !Parking.park(generation, expected: seen, deadline: deadline, retryThreadStarts: true) {
                return generation.pointer.pointee.load(ordering: .sequentiallyConsistent) != seen
            }
        }
        return true
    }

    /// Suspends the calling task until the count reaches zero, as `notify` waits: returns at once,
    /// without suspending, if it is zero now; otherwise resumes at the next zero (even if the count
    /// rises again at once). Never blocks a thread. A cancelled task stops waiting at once and
    /// throws `CancellationError`.
    public func finished() async throws {
        if state.load(ordering: .sequentiallyConsistent) & TKDispatchGroup.countMask == 0 { return }
        let waiters = notifyLock.withLock { () -> AsyncWaiters<Void> in
            if let finishWaiters { return finishWaiters }
            let made = AsyncWaiters<Void>()
            finishWaiters = made
            return made
        }
        // Admission under the waiters' mutex, which `reachedZero` takes to resume them: announce
        // a waiter, then check the count (Dekker's pattern with `leave`, as in `wait`). A leave
        // reaching zero after the flag went up runs `reachedZero`, whose resumeAll comes after this
        // admission (it reads `finishWaiters` under notifyLock after the flag, which this task set
        // after making the list) and finds this task queued; one reaching zero before it is seen as
        // a count of zero here.
        try await waiters.suspend(admit: { () -> Void? in
            let s = state.bitwiseOr(TKDispatchGroup.hasNotify, ordering: .sequentiallyConsistent).oldValue
            return s & TKDispatchGroup.countMask == 0 ? () : nil
        })
    }

    /// `enter()` minus `leave()` now (a snapshot), and whether waiters or notifications may be
    /// pending (the "maybe" flags), for `debugDescription`.
    var snapshot: (count: UInt64, waiters: Bool, notify: Bool) {
        let s = state.load(ordering: .sequentiallyConsistent)
        return (s & TKDispatchGroup.countMask, s & TKDispatchGroup.hasWaiters != 0, s & TKDispatchGroup.hasNotify != 0)
    }

    /// Notification blocks waiting for the next zero (a snapshot).
    var pendingNotifications: Int { notifyLock.withLock { notifications.count } }

    /// Tasks waiting in `finished()` now (tests).
    var asyncWaiterCount: Int { notifyLock.withLock { finishWaiters }?.count ?? 0 }

    /// Submits `work` to `queue` once the count is zero (at once if it is zero now).
    public func notify(queue: TKDispatchQueue, execute work: @escaping @Sendable () -> Void) {
        let fireNow = notifyLock.withLock { () -> Bool in
            notifications.append((queue, work))
            let s = state.bitwiseOr(TKDispatchGroup.hasNotify, ordering: .sequentiallyConsistent).oldValue
            guard s & TKDispatchGroup.countMask == 0 else { return false }
            notifications.removeLast()
            return true
        }
        if fireNow { queue.async(execute: work) }
    }
}

/// The result of a wait with a deadline.
public enum TKDispatchTimeoutResult: Sendable {
    /// What was waited for happened before the deadline.
    case success
    /// The deadline passed first.
    case timedOut
}

extension TKDispatchGroup: WaitTarget {
    var waitDescription: String {
        "TKDispatchGroup \(ObjectIdentifier(self)) (count \(state.load(ordering: .relaxed) & TKDispatchGroup.countMask))"
    }
    /// A group has no owner: the thread that entered it last, as a hint.
    var waitHolder: WaitHolder {
        let last = lastEnterer.load(ordering: .relaxed)
        return last == 0 ? .none("entered by no thread while waits were recorded") : .hint(last, "last entered by")
    }
}
