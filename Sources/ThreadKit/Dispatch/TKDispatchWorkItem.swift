// TKDispatchWorkItem: DispatchWorkItem (SPEC §6). Thread-safe. `cancelled` is a flag any thread
// sets; `finished` is the futex word `wait` parks on; `notifyLock` guards `notifications` and the
// decision that the item has finished (so a notify races with the finish without being lost or run
// twice). `block` and `flags` are immutable.
import Synchronization

public final class TKDispatchWorkItem: @unchecked Sendable {
    let flags: TKDispatchQueue.WorkFlags
    private let block: @Sendable () -> Void
    private let cancelled = Atomic<Bool>(false)
    /// 0 not finished, 1 finished, 2 not finished and a waiter may be parked.
    private let finished = FutexWord(0)
    private let notifyLock = DispatchLock()
    private var notifications: [(TKDispatchQueue, @Sendable () -> Void)] = []   // guarded by notifyLock
    private var hasFinished = false                                              // guarded by notifyLock

    public init(flags: TKDispatchQueue.WorkFlags = [], block: @escaping @Sendable () -> Void) {
        self.flags = flags
        self.block = block
    }

    deinit {
        finished.deallocate()
        notifyLock.deallocate()
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
        let word = finished.pointer
        var spin = SpinWait(limit: DispatchSpin.longWait)
        while true {
            let state = word.pointee.load(ordering: .acquiring)
            if state == 1 { return }
            if spin.spin() { continue }
            if state == 0, !word.pointee.compareExchange(expected: 0, desired: 2, ordering: .acquiring).exchanged { continue }
            _ = Parking.park(finished, expected: 2)
        }
    }

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

    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Marks the item finished the first time; wakes waiters and submits notifications.
    private func finish() {
        let due = notifyLock.withLock { () -> [(TKDispatchQueue, @Sendable () -> Void)]? in
            if hasFinished { return nil }
            hasFinished = true
            defer { notifications.removeAll() }
            return notifications
        }
        guard let due else { return }
        // Releasing: publishes the block's effects to waiters that see 1.
        if finished.pointer.pointee.exchange(1, ordering: .releasing) == 2 { Parking.unparkAll(finished) }
        for (queue, work) in due { queue.async(execute: work) }
    }
}
