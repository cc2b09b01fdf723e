// TKPort: the abstract port of SPEC §4 (NSPort) and its life in run loops. A port added to a
// loop's mode is a version-1 source: messages land in its `inbox` (PortInbox) from any thread,
// the inbox wakes the loops holding the port, and those loops deliver the messages to the
// delegate on their own threads (TKRunLoop+Iteration's `handlePorts`).
//
// Threads: everything here may be called from any thread. `links` (delegate, memberships) is a
// leaf lock; `deliverQueuedMessages` runs on a loop thread, and `delivering` makes sure only one
// loop at a time runs the delegate, so it never runs concurrently with itself and messages stay
// in order. Lock order: a loop's lock is never held while `links` or the inbox lock is taken.
import Synchronization

/// Receives the messages that arrive on a port, on the thread of the run loop the port was added to.
public protocol TKPortDelegate: AnyObject, Sendable {
    /// Handles one message that arrived on a port, like `NSPortDelegate.handle(_:)`. Runs on the
    /// thread of a run loop the port was added to, in arrival order, never concurrently with
    /// itself for one port. Reply through `message.sendPort`.
    func handlePortMessage(_ message: TKPortMessage)
}

// safety: the links are a `Protected`, the flags atomic; `batch` is touched only by the thread
// that won `delivering`; the inbox locks itself.
/// A communication endpoint a run loop can wait on (NSPort). Use the concrete kinds:
/// `TKMessagePort` within a process, `TKSocketPort` between processes.
public class TKPort: @unchecked Sendable {
    /// Posted on `TKNotificationCenter.default`, with the port as object, when it is invalidated.
    public static let didBecomeInvalidNotification: TKNotification.Name = "TKPortDidBecomeInvalidNotification"

    private struct Links {
        weak var delegate: (any TKPortDelegate)?
        /// The loops and modes the port was added to.
        var memberships: [RunLoopMembership] = []
    }

    private let valid = Atomic<Bool>(true)
    private let links = Protected(Links())
    /// Set while one loop runs the delegate over a batch (acquire/release: the batch buffer and
    /// the delegate's own state pass from one delivering thread to the next).
    private let delivering = Atomic<Bool>(false)
    /// The batch being delivered; owned by the thread that set `delivering`. Messages are moved
    /// out of it one by one (iterating an array and then emptying it cost a retain, a release and
    /// a value-witness destroy per message).
    private let batch = JobRing<QueuedPortMessage>(capacity: 64)
    /// Messages received and not yet delivered.
    let inbox: PortInbox

    /// A number for messages and logs ("TKMessagePort #3"), unique in the process.
    let serial: Int
    private static let serials = Atomic<Int>(0)

    init(inboxLimit: Int) {
        inbox = PortInbox(limit: inboxLimit)
        serial = TKPort.serials.wrappingAdd(1, ordering: .relaxed).newValue
        inbox.owner = self
    }

    /// The object that handles arriving messages. Weak, as in Foundation. Messages that arrive
    /// while there is none are kept until one is set.
    public var delegate: (any TKPortDelegate)? {
        get { links.withLock { $0.delegate } }
        set {
            links.withLock { $0.delegate = newValue }
            if newValue != nil { inbox.wakeReceivers() }
        }
    }

    /// Makes the port unusable for good: it leaves every run loop, senders waiting for room fail,
    /// queued messages are dropped, and `didBecomeInvalidNotification` is posted.
    public func invalidate() {
        guard valid.exchange(false, ordering: .acquiringAndReleasing) else { return }
        let memberships = links.withLock { l in
            defer { l.memberships.removeAll() }
            return l.memberships
        }
        for membership in memberships { membership.loop?.detach(self, from: membership.mode) }
        inbox.close()
        didInvalidate()
        TKNotificationCenter.default.post(name: TKPort.didBecomeInvalidNotification, object: self)
    }

    /// Whether the port can still send and receive: true from creation until ``invalidate()``.
    public var isValid: Bool { valid.load(ordering: .acquiring) }

    // MARK: For subclasses

    /// Sends `message` through this port (it is the message's `sendPort`). The base class queues
    /// it here, for a port that receives in this process.
    func transmit(_ message: TKPortMessage, before deadline: ContinuousClock.Instant) -> Bool {
        guard isValid else {
            message.failureReason = "\(self) is invalid. Fix: send to a valid port."
            return false
        }
        // The receiver sees the reply port as its sendPort and this port as its receivePort; its
        // message object is made by the loop that delivers it (QueuedPortMessage).
        let queued = QueuedPortMessage(msgid: message.msgid, components: message.components, replyPort: message.receivePort)
        switch inbox.push(queued, deadline: deadline) {
        case .queued: return true
        case .full:
            message.failureReason =
                "\(self)'s queue stayed full (\(inbox.limit) messages) until the deadline. "
                + "Fix: add the port to a running loop, or give send(before:) a later deadline."
            return false
        case .closed:
            message.failureReason = "\(self) was invalidated. Fix: send to a valid port."
            return false
        }
    }

    /// The modes of `loop` that hold the port.
    func modes(on loop: TKRunLoop) -> [TKRunLoop.Mode] {
        links.withLock { l in l.memberships.filter { $0.loop === loop }.map(\.mode) }
    }

    /// Called once, after the port left its loops.
    func didInvalidate() {}

    /// Called when the port joins the first mode of `loop`.
    func didSchedule(on loop: TKRunLoop) {}

    // MARK: Run-loop side

    /// Recorded by the loop after adding the port to `mode`.
    func joined(_ loop: TKRunLoop, _ mode: TKRunLoop.Mode) {
        let first = links.withLock { l -> Bool in
            let first = !l.memberships.contains { $0.loop === loop }
            l.memberships.append(RunLoopMembership(loop: loop, mode: mode))
            return first
        }
        if first {
            inbox.addReceiver(loop)
            didSchedule(on: loop)
        }
    }

    /// Recorded by the loop after removing the port from `mode`.
    func left(_ loop: TKRunLoop, _ mode: TKRunLoop.Mode) {
        let last = links.withLock { l -> Bool in
            l.memberships.removeAll { $0.loop === loop && $0.mode == mode }
            return !l.memberships.contains { $0.loop === loop }
        }
        if last { inbox.removeReceiver(loop) }
    }

    /// Runs the delegate over the messages queued so far, in order. Loop thread. True if any
    /// message was handled. Another loop already delivering for this port makes this a no-op.
    func deliverQueuedMessages() -> Bool {
        guard inbox.mayHaveMessages, isValid else { return false }
        guard let delegate = links.withLock({ $0.delegate }) else { return false }
        guard delivering.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else {
            return false
        }
        inbox.take(into: batch)
        var handled = false
        while let queued = batch.popFirst() {
            guard isValid else { break }
            let message = queued.message(arrivedOn: self)
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.portMessage(.begin, message) }
            delegate.handlePortMessage(message)
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.portMessage(.end, message) }
            handled = true
        }
        batch.removeAll() // what an invalidation left undelivered
        delivering.store(false, ordering: .releasing)
        return handled
    }
}
