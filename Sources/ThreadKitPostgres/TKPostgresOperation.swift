// TKPostgresOperation: an operation that can cross a process boundary, as the caller describes it
// before adding it to a TKPostgresOperationQueue: a registered kind, a Codable payload (kept as
// JSON), its ordering (queuePriority, qualityOfService), its schedule (not before a time), its
// retry policy, and its dependencies. Once added it has an `id`, the same on every host, and its
// description is fixed (a dependency added later is refused: that is what keeps cycles out).
//
// Threads: any thread; every member is guarded by `lock`.
#if Postgres
    import FoundationEssentials
    import ThreadKit

    /// An operation for a `TKPostgresOperationQueue`: a kind that every worker registered, and a
    /// payload that its handler decodes.
    // safety: every mutable member is guarded by `lock`; `kind`, `payloadJSON`, `isBarrier` are immutable.
    public final class TKPostgresOperation: @unchecked Sendable {
        /// The handler's name, as registered with `TKPostgresOperationQueue.register`.
        public let kind: String
        /// The payload, encoded as JSON.
        public let payloadJSON: String

        private let lock = TKLock()
        private var addedID: Int64? // guarded by `lock`
        private var priority: TKOperation.QueuePriority = .normal // guarded by `lock`
        private var qos: TKQualityOfService = .default // guarded by `lock`
        private var scheduled: Date? // guarded by `lock`
        private var delayed: Duration = .zero // guarded by `lock`
        private var attempts = 3 // guarded by `lock`
        private var backoff: Duration = .seconds(1) // guarded by `lock`
        private var pending: [TKPostgresOperation] = [] // guarded by `lock`
        private var byID: [Int64] = [] // guarded by `lock`
        let isBarrier: Bool

        /// An operation of `kind` carrying `payload` (encoded now, as JSON). Throws when it does not encode.
        public convenience init(kind: String, payload: some Encodable) throws {
            let data: Data
            do { data = try JSONEncoder().encode(payload) } catch {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresOperation(kind: \"\(kind)\"): the payload does not encode as JSON: \(error). Fix: make it Codable.")
            }
            self.init(kind: kind, payloadJSON: String(decoding: data, as: UTF8.self), barrier: false)
        }

        init(kind: String, payloadJSON: String, barrier: Bool) {
            self.kind = kind
            self.payloadJSON = payloadJSON
            self.isBarrier = barrier
        }

        /// A barrier (as `TKOperationQueue.addBarrierBlock`): it starts after every operation added to
        /// its queue before it has ended, and operations added after it start after it has ended.
        public static func barrier(kind: String, payload: some Encodable) throws -> TKPostgresOperation {
            let plain = try TKPostgresOperation(kind: kind, payload: payload)
            return TKPostgresOperation(kind: kind, payloadJSON: plain.payloadJSON, barrier: true)
        }

        /// The id in the database, the same on every host; nil until the operation is added.
        public var id: Int64? { lock.withLock { addedID } }

        /// Higher starts first among ready operations of a queue, FIFO among equals (then by QoS).
        public var queuePriority: TKOperation.QueuePriority {
            get { lock.withLock { priority } }
            set { lock.withLock { priority = newValue } }
        }

        /// Orders after `queuePriority`: higher classes first. Handlers run at this QoS.
        public var qualityOfService: TKQualityOfService {
            get { lock.withLock { qos } }
            set { lock.withLock { qos = newValue } }
        }

        /// The operation starts no earlier than this wall-clock time (the server's clock). Nil: at once.
        public var notBefore: Date? {
            get { lock.withLock { scheduled } }
            set { lock.withLock { scheduled = newValue } }
        }

        /// The operation starts no earlier than this long after it is added, by the server's clock
        /// (no clock skew between hosts). Ignored when `notBefore` is set.
        public var delay: Duration {
            get { lock.withLock { delayed } }
            set { lock.withLock { delayed = max(.zero, newValue) } }
        }

        /// How many runs it may take (1 to 1,000; default 3): a handler that throws, or a worker that
        /// stops renewing its lease, uses one; when none is left the operation is `dead` with the error.
        public var maxAttempts: Int {
            get { lock.withLock { attempts } }
            set { lock.withLock { attempts = newValue } }
        }

        /// The wait before the first retry (default 1 s); each further retry waits twice as long, at
        /// most a day.
        public var retryBackoff: Duration {
            get { lock.withLock { backoff } }
            set { lock.withLock { backoff = newValue } }
        }

        /// Makes this operation start only after `operation` has ended (finished, cancelled or dead),
        /// on whatever host either runs. `operation` may be in any queue; if it is not added yet, add
        /// both in one `addOperations` call. Throws when this operation was already added.
        public func addDependency(_ operation: TKPostgresOperation) throws {
            try lock.withLock {
                try checkNotAdded("addDependency")
                pending.append(operation)
            }
        }

        /// Makes this operation start only after the operation with this id (added by any host) has ended.
        public func addDependency(id: Int64) throws {
            try lock.withLock {
                try checkNotAdded("addDependency(id:)")
                byID.append(id)
            }
        }

        /// Caller holds `lock`.
        private func checkNotAdded(_ what: String) throws {
            if let addedID {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresOperation(kind: \"\(kind)\").\(what): the operation was already added (id \(addedID)); "
                        + "its dependencies are fixed. Fix: add dependencies before adding the operation.")
            }
        }

        /// What `addOperations` stores: one snapshot under the lock.
        struct Description {
            let priority: TKOperation.QueuePriority
            let qos: TKQualityOfService
            let notBefore: Date?
            let delay: Duration
            let maxAttempts: Int
            let backoff: Duration
            let dependencies: [TKPostgresOperation]
            let dependencyIDs: [Int64]
            let addedID: Int64?
        }

        var snapshot: Description {
            lock.withLock {
                Description(
                    priority: priority, qos: qos, notBefore: scheduled, delay: delayed, maxAttempts: attempts, backoff: backoff,
                    dependencies: pending, dependencyIDs: byID, addedID: addedID)
            }
        }

        func markAdded(_ id: Int64) { lock.withLock { addedID = id } }
    }
#endif
