// TKPortMessage: a message for a port (NSPortMessage): an id, data and port components, the port
// it goes to and the port for replies. Built and sent by one thread; a received message is a
// fresh object handed to the receiving delegate. Not meant to be mutated from two threads at once.

// safety: a message belongs to one thread at a time (its sender until the send, then the
// receiving loop's delivering thread), so its mutable fields are never touched concurrently.
/// A message sent through a port. On the receiving side `sendPort` is the port to reply to (the
/// sender's `receivePort`) and `receivePort` is the port it arrived on, as in Foundation.
public final class TKPortMessage: @unchecked Sendable {
    /// One part of a message's payload, as `NSPortMessage`'s components (`NSData` or `NSPort`).
    public enum Component: Sendable {
        /// Bytes, copied into the message.
        case data([UInt8])
        /// A port reference. Within a process the receiver gets the same port object; through a
        /// socket port it gets a `TKSocketPort` that reaches the same address (a `TKMessagePort`
        /// cannot cross processes: such a send fails).
        case port(TKPort)
    }

    // A message belongs to one thread at a time (see above), so the runtime's dynamic
    // exclusivity check is off for its mutable fields: three checks per send were ~400
    // instructions of a message's cost (callgrind).
    /// The message's identifier, free for the application (the seeds use 1000).
    @exclusivity(unchecked) public var msgid: UInt32
    /// The payload, in order: data and port components.
    @exclusivity(unchecked) public private(set) var components: [Component]
    /// Sending side: the port the message goes to. Receiving side: the port to reply to (the
    /// sender's `receivePort`), nil if the sender gave none.
    public let sendPort: TKPort?
    /// Sending side: the port replies should go to. Receiving side: the port it arrived on.
    public let receivePort: TKPort?
    /// Why the last `send(before:)` returned false, nil after a successful send.
    @exclusivity(unchecked) public internal(set) var failureReason: String?

    /// Creates a message with `msgid` 0, like `PortMessage(send:receive:components:)`: it goes to
    /// `sendPort` when sent with `send(before:)`, and replies go to `receivePort`.
    public init(sendPort: TKPort?, receivePort: TKPort?, components: [Component]) {
        self.sendPort = sendPort
        self.receivePort = receivePort
        self.components = components
        msgid = 0
    }

    init(sendPort: TKPort?, receivePort: TKPort?, components: [Component], msgid: UInt32) {
        self.sendPort = sendPort
        self.receivePort = receivePort
        self.components = components
        self.msgid = msgid
    }

    /// Sends the message through `sendPort`. Waits while the receiving port's queue is full, until
    /// `deadline`. Returns false (with `failureReason` set) when there is no send port, the port is
    /// invalid, the queue stays full past the deadline, or a socket port cannot reach its peer.
    public func send(before deadline: ContinuousClock.Instant) -> Bool {
        guard let port = sendPort else {
            failureReason = "TKPortMessage \(msgid) has no sendPort. Fix: create it with the port to send to."
            return false
        }
        failureReason = nil
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.portSent(self) }
        return port.transmit(self, before: deadline)
    }
}
