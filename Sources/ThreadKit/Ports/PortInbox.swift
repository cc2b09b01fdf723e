// PortInbox: the bounded FIFO of messages a port has received and not yet delivered, and the
// loops to wake when one arrives. Any thread pushes; the delivering loop thread takes the whole
// queue at once (a swap, so a burst costs one lock round per batch on the receiving side).
//
// `mutex` guards `queue`, `closed`, `waitingSenders`, `receivers`, `consumers` and
// `consumerWaiters`. It is a leaf lock: nothing else is locked while it is held, and loops are
// woken after it is released. Senders that find the queue full wait on `space` (a RawCondition:
// Parking underneath) until a receiver takes messages, the port closes, or their deadline passes.
//
// Consumers (docs/Concurrency.md §4, TKPort+Messages.swift): while `consumers` > 0 a `messages`
// iteration is active and the inbox belongs to it: the delegate gets nothing (`take(into:)` takes
// nothing, pushes wake no loop) and the iterations take the messages one at a time, in FIFO
// order, waiting on `consumerWaiters`. The waiters' mutex is taken before this one (a consumer's
// admission takes a message under it; a push hands messages to waiting consumers under it, after
// releasing this one), never the reverse. When the last iteration ends, the messages it left are
// the delegate's again and the loops are woken for them: nothing is lost.
import Synchronization

/// A message as it waits in an inbox: what the receiving side's `TKPortMessage` is made from. The
/// taking thread makes that object (`message(arrivedOn:)`), so a message is allocated, and later
/// freed, by the loop that delivers it, and the port is retained there too: made by the sender,
/// it was freed across threads and every sender retained the one port's count per message
/// (a third of a two-sender flood's profile was reference counting on that one object).
struct QueuedPortMessage {
    let msgid: UInt32
    let components: [TKPortMessage.Component]
    /// The port to reply to: the delivered message's `sendPort`.
    let replyPort: TKPort?

    @inline(__always)
    func message(arrivedOn port: TKPort) -> TKPortMessage {
        TKPortMessage(sendPort: replyPort, receivePort: port, components: components, msgid: msgid)
    }
}

// safety: the queue and its counters are touched only under `mutex`; `limit` is immutable.
final class PortInbox: @unchecked Sendable {
    enum PushResult { case queued, full, closed }

    /// The most messages queued at once; a sender finding it reached waits (`send(before:)`).
    let limit: Int
    private let mutex = RawMutex()
    private let space = RawCondition()
    // The fields below are guarded by `mutex`, which already makes every access exclusive: the
    // runtime's dynamic exclusivity check is turned off for them (it cost four checks, ~750
    // instructions, per message sent; callgrind).
    /// The queued messages, oldest first: consumers take from the front one at a time.
    private let queue = JobRing<QueuedPortMessage>(capacity: 64)
    /// The port this inbox belongs to (set once by it, before any message arrives): messages taken
    /// by `messages` iterations are made with it. unowned(unsafe): the port owns the inbox and
    /// only its own calls reach it (a `weak` reference gave the port a side table, which sent
    /// every retain and release of it, several per message, down the runtime's slow path).
    unowned(unsafe) var owner: TKPort?
    @exclusivity(unchecked) private var closed = false
    @exclusivity(unchecked) private var waitingSenders = 0
    @exclusivity(unchecked) private var receivers: [WeakLoop] = []
    /// Active `messages` iterations, and the list their `next()` calls wait on (made by the first).
    @exclusivity(unchecked) private var consumers = 0
    @exclusivity(unchecked) private var consumerWaiters: AsyncWaiters<TKPortMessage?>?
    /// Non-zero while the queue is not empty (`pending` when it became so, or after a consumer
    /// took one), read without the lock by loops deciding whether to look; only `> 0` is ever
    /// asked. Sequentially consistent on both sides, like the loop's `wakePending`: a sender stores it
    /// before its wakeUp() reads `wakePending`; the loop clears `wakePending` before reading it,
    /// so either the sender's wake-up write happens or the loop sees the count.
    private let published = Atomic<Int>(0)
    /// Called after a batch was taken (the socket port resumes reading a paused connection).
    var onDrained: (@Sendable () -> Void)?

    struct WeakLoop { weak var loop: TKRunLoop? }

    init(limit: Int) { self.limit = max(1, limit) }

    var mayHaveMessages: Bool { published.load(ordering: .sequentiallyConsistent) > 0 }

    /// The number of messages waiting.
    var count: Int { mutex.withLock { pending } }

    /// Messages queued and not taken. Mutex held.
    private var pending: Int { queue.count }

    /// Appends `message`, waiting for room until `deadline`.
    func push(_ message: consuming QueuedPortMessage, deadline: ContinuousClock.Instant) -> PushResult {
        let tid = mutex.lockInternal()
        while !closed && pending >= limit {
            if ContinuousClock.now >= deadline { break }
            waitingSenders += 1
            _ = space.wait(mutex, tid, deadline: deadline)
            waitingSenders -= 1
        }
        if !closed && pending >= limit {
            mutex.unlockInternal(tid)
            return .full
        }
        return pushLocked(message, tid)
    }

    /// Appends `message` without waiting and without enforcing the limit: a socket reader that
    /// already took the bytes off the wire must not drop them; it pauses its connection instead
    /// (see `isOverLimit`).
    func pushUnbounded(_ message: consuming QueuedPortMessage) -> PushResult {
        pushLocked(message, mutex.lockInternal())
    }

    /// The rest of a push, with the mutex held (by thread `tid`); releases it. (Two entry points
    /// rather than an optional deadline: copying an optional `ContinuousClock.Instant`, a
    /// resilient type, went through value witnesses, ~100 instructions per message.)
    private func pushLocked(_ message: consuming QueuedPortMessage, _ tid: UInt32) -> PushResult {
        mutex.assertHeld("PortInbox.mutex")
        if closed {
            mutex.unlockInternal(tid)
            return .closed
        }
        let wasEmpty = queue.isEmpty
        queue.append(message)
        if consumers > 0 {
            // An active iteration takes the message: no loop needs waking, only a waiting consumer.
            published.store(pending, ordering: .sequentiallyConsistent)
            let waiting = consumerWaiters
            mutex.unlockInternal(tid)
            if let waiting { handOff(to: waiting) }
            return .queued
        }
        guard wasEmpty else {
            // The push that made the queue non-empty published it and woke the loops, and no loop
            // has taken since (a take empties the queue under this mutex): they will take this
            // message with it. So a burst costs one publication and one wake-up, not one each.
            mutex.unlockInternal(tid)
            return .queued
        }
        published.store(pending, ordering: .sequentiallyConsistent)
        let targets = receivers
        mutex.unlockInternal(tid)
        wake(targets, from: tid)
        return .queued
    }

    /// Whether the queue holds at least `limit` messages.
    var isOverLimit: Bool { mutex.withLock { pending >= limit } }

    /// Moves every queued message into `batch` (which must be empty), in arrival order: the two
    /// rings are swapped. Takes nothing while a `messages` iteration is active: the messages are
    /// the iteration's.
    func take(into batch: JobRing<QueuedPortMessage>) {
        let wakeSenders = mutex.withLock { () -> Bool in
            if consumers > 0 { return false }
            queue.swapContents(with: batch)
            published.store(0, ordering: .sequentiallyConsistent)
            return waitingSenders > 0
        }
        if wakeSenders { space.broadcast() }
        if !batch.isEmpty { onDrained?() }
    }

    /// Drops the queue and refuses further messages; waiting senders return `.closed`, and
    /// `messages` iterations end.
    func close() {
        let waiting = mutex.withLock { () -> AsyncWaiters<TKPortMessage?>? in
            closed = true
            queue.removeAll()
            receivers.removeAll()
            published.store(0, ordering: .sequentiallyConsistent)
            return consumerWaiters
        }
        space.broadcast()
        // Consumers that admit themselves after this see `closed` (under this mutex, taken under
        // theirs), so every one either is resumed here or never waits.
        waiting?.resumeAll(returning: nil)
    }

    // MARK: Consumers (`messages` iterations)

    enum Taken { case message(TKPortMessage), empty, closed }

    /// What taking a message leaves to do once no lock is held: senders waiting for room to wake,
    /// and the drain hook to call (the queue went below its limit: a socket port reads again).
    struct TakeAftermath {
        var wakeSenders = false
        var drained = false
    }

    /// An iteration begins: from now on the messages are taken by consumers, not the delegate.
    /// Returns the list its `next()` calls wait on.
    func beginConsuming() -> AsyncWaiters<TKPortMessage?> {
        mutex.withLock {
            consumers += 1
            if let consumerWaiters { return consumerWaiters }
            let made = AsyncWaiters<TKPortMessage?>()
            consumerWaiters = made
            return made
        }
    }

    /// An iteration ended. The last one gives what is left back to the delegate: the loops are
    /// woken to deliver it.
    func endConsuming() {
        let targets = mutex.withLock { () -> [WeakLoop] in
            consumers -= 1
            return consumers == 0 && pending > 0 ? receivers : []
        }
        wake(targets, from: SystemCall.currentThreadID)
    }

    /// Takes the oldest message for a consumer. Any thread, with or without the consumer
    /// waiters' mutex held (it is taken before this one); call `finish(_:)` with `aftermath`
    /// once no lock is held.
    func takeOne(_ aftermath: inout TakeAftermath) -> Taken {
        mutex.withLock {
            // Only the port's own calls reach its inbox, so the owner is alive here.
            guard !closed, let port = owner else { return .closed }
            let wasAtLimit = pending >= limit
            guard let queued = queue.popFirst() else { return .empty }
            published.store(pending, ordering: .sequentiallyConsistent)
            if waitingSenders > 0 { aftermath.wakeSenders = true }
            if wasAtLimit && pending < limit { aftermath.drained = true }
            return .message(queued.message(arrivedOn: port))
        }
    }

    /// Runs what `takeOne` left to do. No lock held.
    func finish(_ aftermath: TakeAftermath) {
        if aftermath.wakeSenders { space.broadcast() }
        if aftermath.drained { onDrained?() }
    }

    /// After a push while iterations are active: hands queued messages to waiting consumers, the
    /// longest-waiting first, one message each, in FIFO order.
    private func handOff(to waiting: AsyncWaiters<TKPortMessage?>) {
        var aftermath = TakeAftermath()
        let handed = waiting.withLock { () -> [(AsyncWaiters<TKPortMessage?>.Continuation, TKPortMessage)] in
            var handed: [(AsyncWaiters<TKPortMessage?>.Continuation, TKPortMessage)] = []
            while !waiting.isEmptyLocked, case .message(let message) = takeOne(&aftermath) {
                handed.append((waiting.popFirstLocked()!, message))
            }
            return handed
        }
        finish(aftermath)
        for (consumer, message) in handed { consumer.resume(returning: message) }
    }

    /// Active iterations and their waiting `next()` calls (tests).
    var consumerCount: Int { mutex.withLock { consumers } }
    var consumerWaiterCount: Int { mutex.withLock { consumerWaiters }?.count ?? 0 }

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
