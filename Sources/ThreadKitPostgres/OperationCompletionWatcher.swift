// OperationCompletionWatcher: one per TKPostgresOperationQueue object, started on its first
// completion wait: a thread that reads the states of every operation waited for whenever an "f"
// notification of the queue arrives (its own listener session), and every `pollInterval` besides
// (the fallback when notifications are lost: a listener reconnecting, a server restart), and calls
// the callbacks of those that ended. An id with no row ends the wait as `dead`, "no such operation".
//
// Threads: `watch` and `stop` from any thread; callbacks run on the watcher's thread, one at a
// time, outside its lock. `waiters` and `stopped` are guarded by `lock`.
#if Postgres
    import PostgresNIO
    import ThreadKit

    // safety: `waiters` and `stopped` are guarded by `lock`; the rest is immutable after init.
    final class OperationCompletionWatcher: @unchecked Sendable {
        typealias Callback = @Sendable (TKPostgresOperationOutcome) -> Void
        static let pollInterval: Duration = .milliseconds(250)

        private let configuration: TKPostgresConfiguration
        private let owner: String
        private let lock = TKLock()
        private var waiters: [Int64: [Callback]] = [:] // guarded by `lock`
        private var stopped = false // guarded by `lock`
        private let wake = TKDispatchSemaphore(value: 0)
        private let listener: OperationNotificationListener

        init(configuration: TKPostgresConfiguration, owner: String, queueID: Int32) throws {
            self.configuration = configuration
            self.owner = owner
            let wake = self.wake
            listener = OperationNotificationListener(configuration: configuration, owner: owner, queueID: queueID) { kind in
                if kind == "f" { wake.signal() }
            }
            listener.ensure()
            let thread = TKThread(name: "TKPostgresOperationQueue.watcher") { [self] in run() }
            thread.start()
        }

        func watch(_ id: Int64, _ callback: @escaping Callback) throws {
            lock.withLock { waiters[id, default: []].append(callback) }
            wake.signal()
        }

        func stop() {
            lock.withLock { stopped = true }
            listener.close()
            wake.signal()
        }

        /// The watcher's thread. It holds `self` until stopped (the queue's deinit stops it).
        private func run() {
            var session: PostgresSession?
            defer { session?.close() }
            while true {
                let ids = lock.withLock { stopped ? nil : Array(waiters.keys) }
                guard let ids else { return }
                if ids.isEmpty {
                    wake.wait()
                    continue
                }
                listener.ensure()
                var ended: [TKPostgresOperationOutcome] = []
                do {
                    if session == nil || session?.isClosed == true {
                        session?.close()
                        session = try PostgresSession.connect(configuration, owner: owner + " (completion watcher)")
                    }
                    let rows = try session!.query(
                        "SELECT id, state, last_error, attempt, token FROM threadkit_ops WHERE id = ANY(\(ids))",
                        what: "reading the states of waited-for operations")
                    var known: Set<Int64> = []
                    for row in rows {
                        let outcome = try TKPostgresOperationQueue.outcome(row)
                        let id = try row.decode((Int64, String, String?, Int32, Int64).self).0
                        known.insert(id)
                        if let outcome { ended.append(outcome) }
                    }
                    for id in ids where !known.contains(id) {
                        ended.append(
                            TKPostgresOperationOutcome(id: id, state: .dead, lastError: "no such operation", attempts: 0, token: 0))
                    }
                } catch {
                    session?.close()
                    session = nil
                }
                for outcome in ended {
                    let callbacks = lock.withLock { waiters.removeValue(forKey: outcome.id) ?? [] }
                    for callback in callbacks { callback(outcome) }
                }
                _ = wake.wait(until: .now + Self.pollInterval)
            }
        }
    }
#endif
