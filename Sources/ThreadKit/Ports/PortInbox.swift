// PortInbox: the bounded FIFO of messages a port has received and not yet delivered, and the
// loops to wake when one arrives. Any thread pushes; the delivering loop thread takes the whole
// queue at once (a swap, so a burst costs one lock round per batch on the receiving side).
//
// `mutex` guards `queue`, `closed`, `waitingSenders` and `receivers`. It is a leaf lock: nothing
// else is locked while it is held, and loops are woken after it is released. Senders that find
// the queue full wait on `space` (a RawCondition: Parking underneath) until the receiver takes a
// batch, the port closes, or their deadline passes.
import Synchronization

final class PortInbox: @unchecked Sendable {
    enum PushResult { case queued, full, closed }

    /// The most messages queued at once; a sender finding it reached waits (`send(before:)`).
    let limit: Int
    private let mutex = RawMutex()
    private let space = RawCondition()
    private var queue: [TKPortMessage] = []          // guarded by mutex
    private var closed = false                       // guarded by mutex
    private var waitingSenders = 0                   // guarded by mutex
    private var receivers: [WeakLoop] = []           // guarded by mutex
    /// `queue.count` as last published, read without the lock by loops deciding whether to look.
    /// Sequentially consistent on both sides, like the loop's `wakePending`: a sender stores it
    /// before its wakeUp() reads `wakePending`; the loop clears `wakePending` before reading it,
    /// so either the sender's wake-up write happens or the loop sees the count.
    private let published = Atomic<Int>(0)
    /// Called after a batch was taken (the socket port resumes reading a paused connection).
    var onDrained: (@Sendable () -> Void)?

    struct WeakLoop { weak var loop: TKRunLoop? }

    init(limit: Int) { self.limit = max(1, limit) }

    deinit {
        space.deallocate()
        mutex.deallocate()
    }

    var mayHaveMessages: Bool { published.load(ordering: .sequentiallyConsistent) > 0 }

    /// The number of messages waiting.
    var count: Int { mutex.withLock { queue.count } }

    /// Appends `message`, waiting for room until `deadline` (nil: never waits, and the limit is
    /// not enforced: a socket reader that already took the bytes off the wire must not drop them;
    /// it pauses its connection instead, see `isOverLimit`).
    func push(_ message: TKPortMessage, deadline: ContinuousClock.Instant?) -> PushResult {
        let tid = mutex.lockInternal()
        if deadline != nil {
            while !closed && queue.count >= limit {
                if let deadline, ContinuousClock.now >= deadline { break }
                waitingSenders += 1
                _ = space.wait(mutex, tid, deadline: deadline)
                waitingSenders -= 1
            }
        }
        if closed {
            mutex.unlockInternal(tid)
            return .closed
        }
        if deadline != nil && queue.count >= limit {
            mutex.unlockInternal(tid)
            return .full
        }
        queue.append(message)
        published.store(queue.count, ordering: .sequentiallyConsistent)
        let targets = receivers
        mutex.unlockInternal(tid)
        wake(targets, from: tid)
        return .queued
    }

    /// Whether the queue holds at least `limit` messages.
    var isOverLimit: Bool { mutex.withLock { queue.count >= limit } }

    /// Moves every queued message into `batch` (which must be empty), in arrival order.
    func take(into batch: inout [TKPortMessage]) {
        let wakeSenders = mutex.withLock { () -> Bool in
            swap(&queue, &batch)
            published.store(0, ordering: .sequentiallyConsistent)
            return waitingSenders > 0
        }
        if wakeSenders { space.broadcast() }
        if !batch.isEmpty { onDrained?() }
    }

    /// Drops the queue and refuses further messages; waiting senders return `.closed`.
    func close() {
        mutex.withLock {
            closed = true
            queue.removeAll()
            receivers.removeAll()
            published.store(0, ordering: .sequentiallyConsistent)
        }
        space.broadcast()
    }

    func addReceiver(_ loop: TKRunLoop) {
        let hasMessages = mutex.withLock { () -> Bool in
            receivers.removeAll { $0.loop == nil }
            if !receivers.contains(where: { $0.loop === loop }) { receivers.append(WeakLoop(loop: loop)) }
            return !queue.isEmpty
        }
        if hasMessages { loop.wakeUp() }
    }

    func removeReceiver(_ loop: TKRunLoop) {
        mutex.withLock { receivers.removeAll { $0.loop === loop || $0.loop == nil } }
    }

    /// Wakes the receiving loops (a delegate was set while messages wait).
    func wakeReceivers() {
        let tid = SystemCall.currentThreadID
        wake(mutex.withLock { receivers }, from: tid)
    }

    /// A loop running on the calling thread needs no wake-up: it looks at its ports before it
    /// sleeps again.
    private func wake(_ targets: [WeakLoop], from tid: UInt32) {
        for target in targets {
            if let loop = target.loop, loop.ownerThread != tid { loop.wakeUp() }
        }
    }
}
