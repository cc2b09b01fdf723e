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
    /// Handles one event of `aStream` (NSStreamDelegate's `stream(_:handle:)`).
    ///
    /// Called on the thread of a run loop the stream is scheduled on, while that loop runs one of
    /// the scheduled modes, with no ThreadKit lock held: the delegate may read, write, close or
    /// reschedule the stream from here. Each call carries one event; events pending together are
    /// delivered in the order `openCompleted`, `hasBytesAvailable`, `hasSpaceAvailable`,
    /// `errorOccurred`, `endEncountered`, and once the delegate closes the stream nothing more is
    /// delivered. Events the loop delivers while the stream has no delegate are dropped, not kept
    /// for a later one.
    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event)
}

// safety: the mutable state is a `Protected` (`core`); `presence` locks itself.
/// A stream of bytes that can be read or written blocking, or scheduled on a run loop and
/// driven by events (NSStream). Use TKInputStream and TKOutputStream.
public class TKStream: @unchecked Sendable {
    /// What happened to a stream, as handed to `TKStreamDelegate.stream(_:handle:)`
    /// (NSStream.Event, with the same raw values). A delegate call carries one event.
    public struct Event: OptionSet, Sendable, CustomStringConvertible {
        /// The event's bits: NSStream.Event's values (`openCompleted` 1 through `endEncountered` 16).
        public let rawValue: UInt
        /// The event set with the bits of `rawValue` (NSStream.Event's values); unknown bits are kept.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The stream finished opening (a socket: after its connection succeeded). Delivered once,
        /// first; a socket whose connection fails gets `errorOccurred` without it.
        public static let openCompleted = Event(rawValue: 1 << 0)
        /// An input stream has bytes to read (on a socket, also the peer's end: the read then
        /// returns 0): one `read` will not wait. One-shot: `open()` arms it and each `read` arms
        /// the next, so a delegate that does not read on this event gets no more of them (no busy
        /// loop).
        public static let hasBytesAvailable = Event(rawValue: 1 << 1)
        /// An output stream has room: one `write` will not wait. One-shot: `open()` arms it and
        /// each `write` arms the next; on a socket it comes back only when the kernel's buffer has
        /// room again, so a stalled peer costs no CPU.
        public static let hasSpaceAvailable = Event(rawValue: 1 << 2)
        /// The stream failed: `streamStatus` is `.error` and `streamError` says why. Delivered
        /// once; no readiness event follows.
        public static let errorOccurred = Event(rawValue: 1 << 3)
        /// An input stream has nothing more to give: `streamStatus` is `.atEnd` and `read`
        /// returns 0. Delivered once; no readiness event follows.
        public static let endEncountered = Event(rawValue: 1 << 4)

        /// The order events are delivered in when several are pending.
        static let deliveryOrder: [Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .errorOccurred, .endEncountered]

        /// The events' names in delivery order, e.g. `[openCompleted, hasBytesAvailable]`.
        public var description: String {
            let names = ["openCompleted", "hasBytesAvailable", "hasSpaceAvailable", "errorOccurred", "endEncountered"]
            return "[" + Event.deliveryOrder.indices.filter { contains(Event.deliveryOrder[$0]) }.map { names[$0] }.joined(separator: ", ")
                + "]"
        }
    }

    /// Where a stream is in its life (NSStream.Status, with the same raw values):
    /// `notOpen → opening → open → atEnd | error → closed`. Read it with `streamStatus`.
    public enum Status: Int, Sendable {
        /// Made and not yet opened: `read` and `write` return -1.
        case notOpen
        /// `open()` was called and the stream is not ready yet: a socket resolving its host or
        /// connecting (memory, file and bound-pair streams open at once). An unscheduled stream's
        /// `read` and `write` wait for the connection.
        case opening
        /// Open: reads and writes transfer bytes.
        case open
        /// NSStream's "a read is in progress". Never reported by ThreadKit (a read is one call);
        /// kept so the values match NSStream.Status.
        case reading
        /// NSStream's "a write is in progress". Never reported by ThreadKit (a write is one call);
        /// kept so the values match NSStream.Status.
        case writing
        /// An input stream reached its end (`endEncountered`): `read` returns 0 from now on.
        case atEnd
        /// `close()` was called: no more events, `read` and `write` return -1, and the stream
        /// cannot be opened again.
        case closed
        /// The stream failed (`errorOccurred`); `streamError` says why. `read` and `write`
        /// return -1.
        case error

        /// The status whose raw value is `rawValue` (NSStream.Status's values, `notOpen` 0
        /// through `error` 7), or nil if there is none. Written out for its documentation; it is
        /// what the compiler would synthesize.
        public init?(rawValue: Int) {
            switch rawValue {
            case 0: self = .notOpen
            case 1: self = .opening
            case 2: self = .open
            case 3: self = .reading
            case 4: self = .writing
            case 5: self = .atEnd
            case 6: self = .closed
            case 7: self = .error
            default: return nil
            }
        }
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
    /// A task awaiting the stream (``TKInputStream/chunks(maxLength:)``,
    /// ``TKOutputStream/write(_:)``) is resumed and throws.
    public func close() {
        let (wasOpen, delegate) = core.withLock { c -> (Bool, (any TKStreamDelegate)?) in
            guard c.status != .closed else { return (false, nil) }
            c.status = .closed
            c.pending = []
            return (true, c.delegate)
        }
        guard wasOpen else { return }
        presence.invalidate()
        closeSide()
        // The async calls' delegate (TKStream+Async.swift) gets no event after this: wake it.
        (delegate as? StreamEventRelay)?.wake()
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

    /// Stops delivering the stream's events on `loop` while it runs `mode` (`.common`: every
    /// common mode), like `NSStream.remove(from:forMode:)`. Once the stream is in no mode of
    /// `loop`, the loop lets go of it and stops watching its descriptor. Events that happen while
    /// the stream is scheduled nowhere stay queued and are delivered when it is scheduled again.
    /// Thread-safe; removing it from a mode it is not in does nothing.
    public func remove(from loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        presence.remove(from: loop, forMode: mode)
    }

    /// The stream's status now (NSStream's `streamStatus`). Thread-safe; `reading` and `writing`
    /// are never reported.
    public var streamStatus: Status { core.withLock { $0.status } }

    /// Why the stream failed (NSStream's `streamError`): set together with status `.error`,
    /// before `errorOccurred` is delivered, and kept after `close()`; nil if it never failed.
    /// Thread-safe.
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
            guard c.status == .open || c.status == .reading || c.status == .writing, !c.ended else { return false }
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
