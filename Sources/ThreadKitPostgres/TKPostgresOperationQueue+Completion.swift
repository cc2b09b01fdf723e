// TKPostgresOperationQueue+Completion: outcomes observed from any host, by callback, by a blocking
// wait and as an `async` wait, all built on the queue object's OperationCompletionWatcher
// (OperationCompletionWatcher.swift), created on the first wait.
//
// Threads: any thread; callbacks run on the watcher's thread.
#if Postgres
    import PostgresNIO
    import ThreadKit

    extension TKPostgresOperationQueue {
        /// Calls `callback` once operation `id` has ended (at once, from the watcher's thread, if it
        /// already has), whichever host ran it.
        public func onFinished(_ id: Int64, _ callback: @escaping @Sendable (TKPostgresOperationOutcome) -> Void) throws {
            try completionWatcher().watch(id, callback)
        }

        /// Waits until operation `id` has ended or `deadline` passes (then nil; never early).
        public func waitUntilFinished(_ id: Int64, before deadline: ContinuousClock.Instant) throws -> TKPostgresOperationOutcome? {
            let box = OutcomeBox()
            let done = TKDispatchSemaphore(value: 0)
            try onFinished(id) { outcome in
                box.set(outcome)
                done.signal()
            }
            _ = done.wait(until: deadline)
            return box.get()
        }

        /// The outcome of operation `id`, once it has ended, whichever host ran it.
        public func finished(_ id: Int64) async throws -> TKPostgresOperationOutcome {
            try await withCheckedThrowingContinuation { continuation in
                do { try onFinished(id) { continuation.resume(returning: $0) } } catch { continuation.resume(throwing: error) }
            }
        }

        private func completionWatcher() throws -> OperationCompletionWatcher {
            try watcherLock.withLock {
                if let watcher { return watcher }
                let fresh = try OperationCompletionWatcher(configuration: configuration, owner: owner, queueID: queueID)
                watcher = fresh
                return fresh
            }
        }
    }

    /// One outcome handed from the watcher's thread to a waiting thread.
    // safety: `value` is guarded by `lock`.
    private final class OutcomeBox: @unchecked Sendable {
        private let lock = TKLock()
        private var value: TKPostgresOperationOutcome? // guarded by `lock`
        func set(_ outcome: TKPostgresOperationOutcome) { lock.withLock { value = outcome } }
        func get() -> TKPostgresOperationOutcome? { lock.withLock { value } }
    }
#endif
