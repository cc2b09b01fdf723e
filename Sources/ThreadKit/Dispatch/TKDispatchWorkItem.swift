// TKDispatchWorkItem: DispatchWorkItem (SPEC §6). Thread-safe. `cancelled` is a flag any thread
// sets; `finished` is the futex word `wait` parks on; `notifyLock` guards `notifications`, the
// tasks awaiting `finished()` (`finishWaiters`, made by the first of them, closed by the finish:
// docs/Concurrency.md §4) and the decision that the item has finished (so a notify or an await
// races with the finish without being lost or run twice). `block` and `flags` are immutable.
import Synchronization

// safety: the notifications and waiters are touched only under `notifyLock`; the flags are
// atomic or immutable.
/// A block with a life of its own, like `DispatchWorkItem`: run it directly with ``perform()`` or
/// submit it with `TKDispatchQueue.async(execute:)`, then wait for it, get notified when it has
/// finished, or cancel it before it starts. Thread-safe.
public final class TKDispatchWorkItem: @unchecked Sendable {
    let flags: TKDispatchQueue.WorkFlags
    private let block: @Sendable () -> Void
    private let cancelled = Atomic<Bool>(false)
    /// Set once the item has finished; `wait` parks on it.
    private let finished = ParkingEvent()
    private let notifyLock = DispatchLock()
    private var notifications: [(TKDispatchQueue, @Sendable () -> Void)] = [] // guarded by notifyLock
    private var hasFinished = false // guarded by notifyLock
    private var finishWaiters: AsyncWaiters<Void>? // guarded by notifyLock

    /// Creates a work item that runs `block`; `flags` (`.barrier`) apply when it is submitted to a queue.
    public init(flags: TKDispatchQueue.WorkFlags = [], block: @escaping @Sendable () -> Void) {
        self.flags = flags
        self.block = block
    }

    /// Runs the block on the calling thread, unless the item was cancelled; either way the item
    /// has then finished (waiters return, notifications are submitted).
    public func perform() {
        // Acquiring: pairs with `cancel`'s releasing store (a cancel that happened before is seen).
        if !cancelled.load(ordering: .acquiring) { block() }
        finish()
    }

    /// A queue reached the item: the same as `perform()`.
    func runFromQueue() { perform() }

    /// Waits until the item has finished (performed, or skipped because it was cancelled).
    public func wait() {
        _ = finished.wait(spinLimit: DispatchSpin.longWait, observed: true, retryThreadStarts: true)
    }

    /// Suspends the calling task until the item has finished: performed, or skipped by the queue
    /// that reached it because it was cancelled (as `wait()`). Returns at once, without suspending,
    /// if it has. Never blocks a thread. A cancelled task stops waiting at once and throws
    /// `CancellationError`.
    public func finished() async throws {
        if finished.isSet { return }
        let waiters = notifyLock.withLock { () -> AsyncWaiters<Void>? in
            if hasFinished { return nil }
            if let finishWaiters { return finishWaiters }
            let made = AsyncWaiters<Void>()
            finishWaiters = made
            return made
        }
        guard let waiters else { return }
        try await waiters.wait()
    }

    /// Tasks waiting in `finished()` now (tests).
    var asyncWaiterCount: Int { notifyLock.withLock { finishWaiters }?.count ?? 0 }

    /// Submits `work` to `queue` when the item finishes (at once if it has).
    public func notify(queue: TKDispatchQueue, execute work: @escaping @Sendable () -> Void) {
        let now = notifyLock.withLock { () -> Bool in
            if hasFinished { return true }
            notifications.append((queue, work))
            return false
        }
        if now { queue.async(execute: work) }
    }

    /// Cancels the item: if it has not started, it never runs. A running block is not interrupted.
    public func cancel() { cancelled.store(true, ordering: .releasing) }

    /// Whether ``cancel()`` has been called (it stays true even if the block had already run).
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Marks the item finished the first time; wakes waiters and submits notifications.
    private func finish() {
        let taken = notifyLock.withLock { () -> ([(TKDispatchQueue, @Sendable () -> Void)], AsyncWaiters<Void>?)? in
            if hasFinished { return nil }
            hasFinished = true
            defer {
                notifications.removeAll()
                finishWaiters = nil
            }
            return (notifications, finishWaiters)
        }
        guard let (due, waiters) = taken else { return }
        // Releasing: publishes the block's effects to waiters that see 1.
        finished.set()
        // Tasks that took the list before `hasFinished` was set; later ones see it set.
        waiters?.close(returning: ())
        for (queue, work) in due { queue.async(execute: work) }
    }
}
