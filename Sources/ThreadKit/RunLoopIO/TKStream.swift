// TKStream: NSStream's common part: status, error, delegate, scheduling on run loops, and event
// delivery (docs/RunLoopIO.md, "Streams"). What a stream reads from or writes to is its side
// (StreamSides.swift): memory, a file, a socket channel, or one end of a bound pair.
//
// Threads: `read`/`write`, `open`, `close` by one thread at a time (any); scheduling, the
// delegate and the status from any thread; events are delivered on a loop thread in a scheduled
// mode, with no lock held. `core` guards status, error, delegate and pending events; it is never
// held while calling a side (whose locks are never held while calling back here), the delegate,
// or TKRunLoop.add/remove.
import Synchronization

/// Receives a stream's events on the thread of the run loop it is scheduled on.
public protocol TKStreamDelegate: AnyObject, Sendable {
    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event)
}

/// A stream of bytes that can be read or written blocking, or scheduled on a run loop and
/// driven by events (NSStream). Use TKInputStream and TKOutputStream.
public class TKStream: @unchecked Sendable {
    /// NSStream.Event.
    public struct Event: OptionSet, Sendable, CustomStringConvertible {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static let openCompleted = Event(rawValue: 1 << 0)
        public static let hasBytesAvailable = Event(rawValue: 1 << 1)
        public static let hasSpaceAvailable = Event(rawValue: 1 << 2)
        public static let errorOccurred = Event(rawValue: 1 << 3)
        public static let endEncountered = Event(rawValue: 1 << 4)

        /// The order events are delivered in when several are pending.
        static let deliveryOrder: [Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .errorOccurred, .endEncountered]

        public var description: String {
            let names = ["openCompleted", "hasBytesAvailable", "hasSpaceAvailable", "errorOccurred", "endEncountered"]
            return "[" + Event.deliveryOrder.indices.filter { contains(Event.deliveryOrder[$0]) }.map { names[$0] }.joined(separator: ", ") + "]"
        }
    }

    /// NSStream.Status.
    public enum Status: Int, Sendable {
        case notOpen, opening, open, reading, writing, atEnd, closed, error
    }

    struct Core {
        var status = Status.notOpen
        var error: TKError?
        weak var delegate: (any TKStreamDelegate)?
        /// Events waiting for delivery (each kind at most once).
        var pending: Event = []
        /// errorOccurred or endEncountered was posted: no further readiness events.
        var ended = false
    }

    let core = Protected(Core())
    let presence = LoopPresence()

    init() {}

    // MARK: Public API

    /// Opens the stream. Scheduled: `openCompleted` follows on the loop (after the connection for
    /// sockets). Unscheduled: reads and writes may begin at once (sockets wait for the connection).
    public func open() {
        let first = core.withLock { c -> Bool in
            guard c.status == .notOpen else { return false }
            c.status = .opening
            return true
        }
        if first { openSide() }
    }

    /// Closes the stream: it leaves its loops, gets no more events, and releases what it holds.
    public func close() {
        let wasOpen = core.withLock { c -> Bool in
            guard c.status != .closed else { return false }
            c.status = .closed
            c.pending = []
            return true
        }
        guard wasOpen else { return }
        presence.invalidate()
        closeSide()
    }

    /// Receives the events. Weak, as NSStream's.
    public weak var delegate: (any TKStreamDelegate)? {
        get { core.withLock { $0.delegate } }
        set { core.withLock { $0.delegate = newValue } }
    }

    /// Delivers the stream's events on `loop`'s thread while it runs `mode` (`.common`: the
    /// common modes). The loop keeps the stream alive while it is scheduled.
    public func schedule(in loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        guard streamStatus != .closed else { return }
        presence.add(self, to: loop, forMode: mode)
    }

    public func remove(from loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        presence.remove(from: loop, forMode: mode)
    }

    public var streamStatus: Status { core.withLock { $0.status } }

    public var streamError: TKError? { core.withLock { $0.error } }

    // MARK: For the sides and subclasses

    /// Subclasses: start opening their side (which calls `opened()` or `failed(_:)`).
    func openSide() {}
    /// Subclasses: release their side.
    func closeSide() {}
    /// Subclasses: arm the side's one-shot readiness event.
    func armSide() {}
    /// Subclasses: the stream joined the first mode of / left the last mode of `loop`.
    func sideJoined(_ loop: TKRunLoop) {}
    func sideLeft(_ loop: TKRunLoop) {}

    /// The side is open: `openCompleted`, then the first readiness event is armed.
    func opened() {
        let proceed = core.withLock { c -> Bool in
            guard c.status == .opening else { return false }
            c.status = .open
            c.pending.insert(.openCompleted)
            return true
        }
        guard proceed else { return }
        presence.signal()
        armSide()
    }

    /// The side failed: status `error`, `streamError`, and `errorOccurred` once.
    func failed(_ error: TKError) {
        let post = core.withLock { c -> Bool in
            guard c.status != .closed, c.status != .error, !c.ended else { return false }
            c.status = .error
            c.error = error
            c.ended = true
            c.pending.insert(.errorOccurred)
            return true
        }
        if post { presence.signal() }
    }

    /// The input side has nothing more: status `atEnd` and `endEncountered` once.
    func reachedEnd() {
        let post = core.withLock { c -> Bool in
            guard c.status != .closed, c.status != .error, !c.ended else { return false }
            c.status = .atEnd
            c.ended = true
            c.pending.insert(.endEncountered)
            return true
        }
        if post { presence.signal() }
    }

    /// Queues a readiness event (hasBytesAvailable / hasSpaceAvailable) unless the stream ended.
    func post(_ event: Event) {
        let post = core.withLock { c -> Bool in
            guard (c.status == .open || c.status == .reading || c.status == .writing), !c.ended else { return false }
            c.pending.insert(event)
            return true
        }
        if post { presence.signal() }
    }
}

extension TKStream: LoopPresenceOwner {
    func joined(_ loop: TKRunLoop) {
        sideJoined(loop)
        if core.withLock({ !$0.pending.isEmpty }) { presence.signal() }
    }

    func left(_ loop: TKRunLoop) { sideLeft(loop) }

    /// Delivers the pending events in order, on the loop thread, with no lock held.
    func perform() {
        let (events, delegate) = core.withLock { c -> (Event, (any TKStreamDelegate)?) in
            defer { c.pending = [] }
            return (c.status == .closed ? [] : c.pending, c.delegate)
        }
        guard let delegate, !events.isEmpty else { return }
        for event in Event.deliveryOrder where events.contains(event) {
            // The delegate may close the stream while handling an event: nothing after that.
            if event != .openCompleted && streamStatus == .closed { return }
            delegate.stream(self, handle: event)
        }
    }
}
