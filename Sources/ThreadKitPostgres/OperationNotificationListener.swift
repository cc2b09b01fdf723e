// OperationNotificationListener: one session LISTENing on the operation queues' channel
// (OperationQueueSchema.channel), handing each notification of one queue ("n", "f" or "c") to a
// handler. The handler runs on the connection's event-loop thread: it must only signal (never
// block). A session that closes (server restart, cut) is replaced by `ensure()`, which the owner
// calls from its own thread now and then; while there is none, the owner's polling covers.
//
// Threads: `ensure()` and `close()` from any thread, serialized by `lock`, which guards `session`.
#if Postgres
    import PostgresNIO
    import ThreadKit

    // safety: `session` and `closed` are guarded by `lock`; the rest is immutable after init.
    final class OperationNotificationListener: @unchecked Sendable {
        private let configuration: TKPostgresConfiguration
        private let owner: String
        private let queueID: Int32
        private let handler: @Sendable (Character) -> Void
        private let lock = TKLock()
        private var session: PostgresSession? // guarded by `lock`
        private var closed = false // guarded by `lock`

        init(configuration: TKPostgresConfiguration, owner: String, queueID: Int32, handler: @escaping @Sendable (Character) -> Void) {
            self.configuration = configuration
            self.owner = owner
            self.queueID = queueID
            self.handler = handler
        }

        /// Connects and listens unless a live session does already. Whether it is listening.
        @discardableResult
        func ensure() -> Bool {
            lock.withLock {
                if closed { return false }
                if let session, !session.isClosed { return true }
                session?.close()
                session = nil
                do {
                    let fresh = try PostgresSession.connect(configuration, owner: owner + " (listener)")
                    let queue = String(queueID)
                    let handler = self.handler
                    fresh.connection.addListener(channel: OperationQueueSchema.channel) { _, message in
                        let parts = message.payload.split(separator: " ")
                        guard parts.count == 2, parts[1] == queue, let kind = parts[0].first else { return }
                        handler(kind)
                    }
                    _ = try fresh.query(
                        "LISTEN \(unescaped: OperationQueueSchema.channel)", what: "listening for the queue's notifications")
                    session = fresh
                    // Whatever happened while nobody listened: as if notified of everything.
                    handler("n")
                    handler("f")
                    handler("c")
                    return true
                } catch {
                    return false
                }
            }
        }

        func close() {
            lock.withLock {
                closed = true
                session?.close()
                session = nil
            }
        }

        deinit { session?.close() }
    }
#endif
