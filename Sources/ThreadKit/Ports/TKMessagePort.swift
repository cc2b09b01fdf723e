// TKMessagePort: the in-process port (NSMachPort's role). All of its machinery is TKPort's: a
// message sent to it is queued in its inbox and delivered on the loop it was added to.
// Thread-safe.

// safety: adds no stored state to TKPort.
/// A port for messages between threads of one process. Add it to a run loop and set a delegate;
/// `TKPortMessage.send(before:)` from any thread queues a message and wakes that loop.
public final class TKMessagePort: TKPort, @unchecked Sendable, CustomStringConvertible {
    /// How many undelivered messages a port holds by default before senders wait.
    public static let defaultQueueLimit = 65_536

    /// A valid port holding at most ``defaultQueueLimit`` undelivered messages, like `NSMachPort()`.
    public init() { super.init(inboxLimit: TKMessagePort.defaultQueueLimit) }

    /// A port holding at most `queueLimit` undelivered messages (at least 1).
    public init(queueLimit: Int) { super.init(inboxLimit: queueLimit) }

    /// The number of messages received and not yet delivered.
    public var queuedMessageCount: Int { inbox.count }

    /// `TKMessagePort #N`, N a number unique to the port in this process.
    public var description: String { "TKMessagePort #\(serial)" }
}
