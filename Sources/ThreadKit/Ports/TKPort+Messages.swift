// TKPort+Messages: a port's received messages as an AsyncSequence (docs/Concurrency.md §4).
//
// The consumer rule: while at least one `messages` iteration is active (from `makeAsyncIterator`
// until it ends), the port's messages go to the iterations instead of the delegate, in FIFO order,
// straight from the port's inbox: no run loop is needed. Messages queued before the iteration
// began and not yet taken by a loop are the iteration's too; messages a loop had already taken
// stay the delegate's. When the last iteration ends, what it did not take is the delegate's again
// (the loops holding the port are woken for it). Nothing is lost; `invalidate()` drops the queue
// and ends every iteration (`next()` returns nil).
//
// Owns: one PortConsumer per iteration (its `ended` flag). Threads: the iterating task calls
// `next()`; the iterator's last copy may be dropped on any thread. Locks: the inbox's consumer
// waiters' mutex, then the inbox mutex (PortInbox.swift); nothing else.
import Synchronization

extension TKPort {
    /// The messages arriving on this port, as an AsyncSequence. See the file header for who gets a
    /// message while an iteration is active. Each iteration ends when its task is cancelled
    /// (`next()` returns nil), when it is left (`break`, the iterator dropped), or when the port
    /// is invalidated. Several iterations at once share the messages: each message goes to one of
    /// them, the one that has waited longest.
    public var messages: Messages { Messages(port: self) }

    /// See `TKPort.messages`.
    public struct Messages: AsyncSequence, Sendable {
        /// Each element is one message that arrived on the port.
        public typealias Element = TKPortMessage
        /// Iteration never throws; it ends (nil) on cancellation or invalidation.
        public typealias Failure = Never

        let port: TKPort

        /// Begins an iteration: the port's messages are the iterator's from now on.
        public func makeAsyncIterator() -> Iterator {
            Iterator(consumer: PortConsumer(port: port))
        }

        /// One iteration's registration as a consumer of the port's messages; dropping its last
        /// copy ends the iteration.
        public struct Iterator: AsyncIteratorProtocol, Sendable {
            let consumer: PortConsumer

            /// The next message, waiting for one if none is queued; nil once the port is invalid
            /// or the iterating task was cancelled.
            public mutating func next() async -> TKPortMessage? {
                await consumer.next()
            }
        }
    }
}

/// One `messages` iteration: a registration as a consumer of the port's inbox, ended once (by
/// cancellation, invalidation, or deinit when the iterator's last copy is dropped).
final class PortConsumer: Sendable {
    let port: TKPort
    private let waiters: AsyncWaiters<TKPortMessage?>
    /// Set once by `end`; the exchange makes the inbox's count drop exactly once.
    private let ended = Atomic<Bool>(false)

    init(port: TKPort) {
        self.port = port
        waiters = port.inbox.beginConsuming()
    }

    deinit { end() }

    func end() {
        if !ended.exchange(true, ordering: .relaxed) { port.inbox.endConsuming() }
    }

    func next() async -> TKPortMessage? {
        if ended.load(ordering: .relaxed) { return nil }
        if Task.isCancelled {
            end()
            return nil
        }
        let inbox = port.inbox
        var aftermath = PortInbox.TakeAftermath()
        switch inbox.takeOne(&aftermath) {
        case .message(let message):
            inbox.finish(aftermath)
            return message
        case .closed:
            end()
            return nil
        case .empty:
            break
        }
        do {
            // Admission under the waiters' mutex: a push hands its message over under the same
            // mutex, so a message is either taken here or handed to this waiter once it is queued.
            let message = try await waiters.suspend(admit: { () -> TKPortMessage?? in
                switch inbox.takeOne(&aftermath) {
                case .message(let message): return .some(message)
                case .closed: return .some(nil)
                case .empty: return nil
                }
            })
            inbox.finish(aftermath)
            if message == nil { end() }
            return message
        } catch {
            end()
            return nil
        }
    }
}
