// TKPostgresOperationQueue: OperationQueue's model across processes and hosts, its operations kept
// in PostgreSQL (docs/OperationQueuePostgres.md). Any process that opens the queue by name can add
// operations, cancel them, change the cluster-wide limit, read statistics and wait for outcomes;
// processes that register handlers for its kinds and start a worker (TKPostgresOperationWorker)
// run them. The schema and its state machine: OperationQueueSchema.swift.
//
// Threads: every public member may be called from any thread. Database calls of this object run
// on `session`, serialized by `callLock` (held across the network wait); `kinds` is guarded by
// `kindLock`; completion waits are the watcher's (TKPostgresOperationQueue+Completion.swift).
#if Postgres
    import FoundationEssentials
    import PostgresNIO
    import ThreadKit

    /// An operation queue whose operations are rows in PostgreSQL, run by workers on any host.
    // safety: `kinds` is guarded by `kindLock`, `session` by `callLock`, `watcher` by `watcherLock`; the
    // rest is immutable after init.
    public final class TKPostgresOperationQueue: @unchecked Sendable {
        /// The queue's name in Unicode NFC (the lock's name rules: 1 to 1024 UTF-8 bytes, no NUL).
        public let name: String
        /// The server that keeps the queue.
        public let configuration: TKPostgresConfiguration
        /// The queue's row id in threadkit_queues (its NOTIFY payloads and advisory key use it).
        let queueID: Int32

        /// A registered kind: decodes the payload and runs the handler.
        typealias Runner = @Sendable (String, TKPostgresOperationContext) throws -> Void
        private let kindLock = TKLock()
        private var kinds: [String: Runner] = [:] // guarded by `kindLock`
        private let callLock = TKLock()
        private var session: PostgresSession? // guarded by `callLock`
        /// Created on the first completion wait.
        let watcherLock = TKLock()
        var watcher: OperationCompletionWatcher? // guarded by `watcherLock`

        var owner: String { "TKPostgresOperationQueue(\"\(name.prefix(64))\")" }

        /// Opens (creating on first use) the queue `name` in the database of `configuration`,
        /// creating or migrating ThreadKit's tables. Throws a `TKError` naming what to fix: a bad name,
        /// an unreachable server, refused credentials, a user that may not create tables.
        public init(name: String, configuration: TKPostgresConfiguration) throws {
            let name = LockSchema.normalized(name)
            try Self.validate(name: name)
            self.name = name
            self.configuration = configuration
            let (session, queueID) = try PostgresSession.connect(configuration, owner: "TKPostgresOperationQueue(\"\(name.prefix(64))\")") {
                try LockSchema.ensureTables($0)
                try OperationQueueSchema.ensure($0)
                return try OperationQueueSchema.queueID(of: name, $0)
            }
            self.queueID = queueID
            self.session = session
        }

        /// As `init(name:configuration:)` with the URL given, or `TK_POSTGRES_URL` when `url` is nil.
        public convenience init(name: String, url: String? = nil) throws {
            let configuration = try url.map { try TKPostgresConfiguration(url: $0) } ?? TKPostgresConfiguration.fromEnvironment()
            try self.init(name: name, configuration: configuration)
        }

        deinit {
            watcher?.stop()
            session?.close()
        }

        static func validate(name: String) throws {
            let bytes = name.utf8.count
            if bytes == 0 {
                throw TKError(.invalidArgument, "TKPostgresOperationQueue(name: \"\"): the name is empty. Fix: name the queue.")
            }
            if bytes > LockSchema.maximumNameBytes {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresOperationQueue(name: \"\(name.prefix(32))…\"): the name is \(bytes) UTF-8 bytes long; the limit is "
                        + "\(LockSchema.maximumNameBytes). Fix: use a shorter name.")
            }
            if name.utf8.contains(0) {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresOperationQueue(name:): the name contains a NUL character, which PostgreSQL text cannot hold. Fix: remove it."
                )
            }
        }

        // MARK: Kinds

        /// Registers the handler of `kind` in this process: workers of this queue object claim only the
        /// kinds registered here. The handler runs on a worker's local `TKOperationQueue` with the
        /// decoded payload; returning finishes the operation, throwing fails this run (retried after
        /// backoff until `maxAttempts` runs, then dead with the error).
        public func register<Payload: Decodable & Sendable>(
            _ kind: String, payload: Payload.Type,
            handler: @escaping @Sendable (Payload, TKPostgresOperationContext) throws -> Void
        ) throws {
            try Self.validate(kind: kind)
            let runner: Runner = { json, context in
                let payload: Payload
                do { payload = try JSONDecoder().decode(Payload.self, from: Data(json.utf8)) } catch {
                    throw TKError(
                        .invalidArgument,
                        "operation \(context.operationID) of kind \"\(kind)\": the payload does not decode as \(Payload.self): \(error)")
                }
                try handler(payload, context)
            }
            kindLock.withLock { kinds[kind] = runner }
        }

        var registeredKinds: [String: Runner] { kindLock.withLock { kinds } }

        static func validate(kind: String) throws {
            if kind.isEmpty || kind.utf8.count > LockSchema.maximumNameBytes || kind.utf8.contains(0) {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresOperationQueue: the kind \"\(kind.prefix(32))\" is empty, longer than \(LockSchema.maximumNameBytes) "
                        + "UTF-8 bytes or contains NUL. Fix: name kinds with short, plain strings.")
            }
        }

        // MARK: Adding

        /// Adds one operation; returns its id (also in `operation.id`).
        @discardableResult
        public func addOperation(_ operation: TKPostgresOperation) throws -> Int64 {
            try addOperations([operation], waitUntilFinished: false)
            return operation.id ?? 0
        }

        /// Adds `operation` as a barrier (as `addBarrierBlock`); returns its id.
        @discardableResult
        public func addBarrier(_ operation: TKPostgresOperation) throws -> Int64 {
            guard operation.isBarrier else {
                throw TKError(
                    .invalidArgument,
                    "\(owner).addBarrier: the operation is not a barrier. Fix: create it with TKPostgresOperation.barrier(kind:payload:).")
            }
            return try addOperation(operation)
        }

        /// Adds `operations` in one transaction (all or none), and with `waitUntilFinished` waits until
        /// every one has ended, on whichever hosts run them, returning their outcomes in order.
        /// Dependencies among them are stored with them; a dependency cycle, a dependency on an
        /// operation neither added nor in this call, or an operation already added, throws
        /// `.invalidArgument` and adds nothing.
        @discardableResult
        public func addOperations(_ operations: [TKPostgresOperation], waitUntilFinished wait: Bool) throws -> [TKPostgresOperationOutcome]
        {
            if operations.isEmpty { return [] }
            let ordered = try topologicalOrder(operations)
            var snapshots: [ObjectIdentifier: TKPostgresOperation.Description] = [:]
            for operation in ordered { snapshots[ObjectIdentifier(operation)] = operation.snapshot }
            for operation in ordered {
                let description = snapshots[ObjectIdentifier(operation)]!
                try Self.validate(kind: operation.kind)
                guard (1...1000).contains(description.maxAttempts) else {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).addOperations: maxAttempts \(description.maxAttempts) of a \"\(operation.kind)\" operation is outside 1…1000. "
                            + "Fix: give at least 1 run.")
                }
            }
            try callLock.withLock {
                let session = try liveSession()
                let idRows = try session.query(
                    "SELECT nextval('threadkit_op_ids') FROM generate_series(1, \(ordered.count))", what: "allocating operation ids")
                let ids = try idRows.map { try $0.decode(Int64.self) }.sorted()
                var index: [ObjectIdentifier: Int64] = [:]
                for (operation, id) in zip(ordered, ids) { index[ObjectIdentifier(operation)] = id }
                var edgeOp: [Int64] = []
                var edgeDep: [Int64] = []
                var kinds: [String] = []
                var payloads: [String] = []
                var priorities: [Int32] = []
                var qos: [Int32] = []
                var notBefore: [Int64] = []
                var delays: [Int64] = []
                var attempts: [Int32] = []
                var backoffs: [Int32] = []
                var barriers: [Bool] = []
                for operation in ordered {
                    let description = snapshots[ObjectIdentifier(operation)]!
                    let id = index[ObjectIdentifier(operation)]!
                    for dependency in description.dependencies {
                        edgeOp.append(id)
                        edgeDep.append(index[ObjectIdentifier(dependency)] ?? dependency.id ?? 0)
                    }
                    for dependency in description.dependencyIDs {
                        edgeOp.append(id)
                        edgeDep.append(dependency)
                    }
                    kinds.append(operation.kind)
                    payloads.append(operation.payloadJSON)
                    priorities.append(Int32(description.priority.rawValue))
                    qos.append(Self.rank(description.qos))
                    notBefore.append(description.notBefore.map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.up)) } ?? -1)
                    delays.append(DeadlineArithmetic.millisecondsRoundedUp(description.delay))
                    attempts.append(Int32(description.maxAttempts))
                    backoffs.append(Int32(clamping: DeadlineArithmetic.millisecondsRoundedUp(description.backoff)))
                    barriers.append(operation.isBarrier)
                }
                do {
                    _ = try Self.retryingDeadlocks {
                        try session.query(
                            """
                            SELECT threadkit_op_add(\(queueID), \(ids), \(kinds), \(payloads), \(priorities), \(qos), \(notBefore), \(delays),
                                \(attempts), \(backoffs), \(barriers), \(edgeOp), \(edgeDep))
                            """, what: "adding \(ordered.count) operation(s)")
                    }
                } catch let error as TKError where error.message.contains("(TK001:") || error.message.contains("is not an operation") {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).addOperations: \(error.message) Fix: depend only on operations that were added (their id).")
                }
                for (operation, id) in zip(ordered, ids) { operation.markAdded(id) }
            }
            if !wait { return [] }
            return try operations.map { operation in
                guard let outcome = try self.waitUntilFinished(operation.id ?? 0, before: .now + .seconds(86_400 * 365 * 100)) else {
                    throw TKError(.systemCall, "\(owner).addOperations: the wait ended without an outcome.", errno: ETIMEDOUT)
                }
                return outcome
            }
        }

        /// Runs `body` again (at most 5 times) when the server aborted it as a deadlock victim (40P01):
        /// an add holds its dependencies FOR SHARE while a settlement, a cancel or a rescue of one of
        /// them may hold it and wait for a dependent; both lock in id order, but each takes two sets in
        /// turn, so the server can still find a cycle and abort one side. The aborted statement changed
        /// nothing, so running it again is safe.
        static func retryingDeadlocks<T>(_ body: () throws -> T) throws -> T {
            var attempt = 0
            while true {
                do { return try body() } catch let error as TKError where error.message.contains("(40P01:") && attempt < 4 {
                    attempt += 1
                }
            }
        }

        /// QoS as an order (higher starts first); `.default` sits between userInitiated and utility.
        static func rank(_ qos: TKQualityOfService) -> Int32 {
            switch qos {
            case .userInteractive: return 5
            case .userInitiated: return 4
            case .default: return 3
            case .utility: return 2
            case .background: return 1
            default: return 0
            }
        }

        static func qos(rank: Int) -> TKQualityOfService {
            switch rank {
            case 5: return .userInteractive
            case 4: return .userInitiated
            case 2: return .utility
            case 1: return .background
            default: return .default
            }
        }

        /// `operations` with every dependency inside the batch before its dependents; throws on a
        /// cycle, on an operation already added, and on a dependency neither added nor in the batch.
        private func topologicalOrder(_ operations: [TKPostgresOperation]) throws -> [TKPostgresOperation] {
            var inBatch: Set<ObjectIdentifier> = []
            for operation in operations {
                if let id = operation.id {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).addOperations: a \"\(operation.kind)\" operation was already added (id \(id)). Fix: create a new operation."
                    )
                }
                if !inBatch.insert(ObjectIdentifier(operation)).inserted {
                    throw TKError(.invalidArgument, "\(owner).addOperations: a \"\(operation.kind)\" operation appears twice in one call.")
                }
            }
            var order: [TKPostgresOperation] = []
            var mark: [ObjectIdentifier: Int] = [:] // 1: on the current path, 2: done
            func visit(_ operation: TKPostgresOperation, path: [String]) throws {
                let key = ObjectIdentifier(operation)
                if mark[key] == 2 { return }
                if mark[key] == 1 {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).addOperations: the dependencies form a cycle (\((path + [operation.kind]).joined(separator: " → "))); "
                            + "nothing was added. Fix: remove one dependency of the cycle.")
                }
                mark[key] = 1
                for dependency in operation.snapshot.dependencies {
                    if inBatch.contains(ObjectIdentifier(dependency)) {
                        try visit(dependency, path: path + [operation.kind])
                    } else if dependency.id == nil {
                        throw TKError(
                            .invalidArgument,
                            "\(owner).addOperations: a \"\(operation.kind)\" operation depends on a \"\(dependency.kind)\" operation that "
                                + "is neither added nor in this call. Fix: add both in one addOperations call, or the dependency first.")
                    }
                }
                mark[key] = 2
                order.append(operation)
            }
            for operation in operations { try visit(operation, path: []) }
            return order
        }

        // MARK: Cancelling, limits

        /// Cancels the operation: one not started yet ends `cancelled` at once (its dependents may
        /// start); a running one's handler sees `isCancelled` (within a lease renewal, usually at once
        /// through NOTIFY). Returns false when it had already ended.
        @discardableResult
        public func cancel(_ id: Int64) throws -> Bool {
            try callLock.withLock {
                let session = try liveSession()
                let rows = try Self.retryingDeadlocks {
                    try session.query("SELECT threadkit_op_cancel(\(queueID), \([id]))", what: "cancelling operation \(id)")
                }
                return try (rows.first?.decode(Int32.self) ?? 0) > 0
            }
        }

        /// Cancels every operation of the queue that has not ended; returns how many.
        @discardableResult
        public func cancelAllOperations() throws -> Int {
            try callLock.withLock {
                let session = try liveSession()
                let rows = try Self.retryingDeadlocks {
                    try session.query("SELECT threadkit_op_cancel(\(queueID), NULL)", what: "cancelling every operation")
                }
                return Int(try rows.first?.decode(Int32.self) ?? 0)
            }
        }

        /// The most operations of this queue that run at once across all workers on all hosts (-1: no
        /// limit, the default).
        public func maxConcurrentOperationCount() throws -> Int {
            try callLock.withLock {
                let rows = try liveSession().query(
                    "SELECT max_concurrent FROM threadkit_queues WHERE id = \(queueID)", what: "reading maxConcurrentOperationCount")
                return Int(try rows.first?.decode(Int32.self) ?? -1)
            }
        }

        /// Sets the cluster-wide limit (-1: none). Workers start no run beyond it; runs already going
        /// finish.
        public func setMaxConcurrentOperationCount(_ count: Int) throws {
            guard count == -1 || (1...1_000_000).contains(count) else {
                throw TKError(
                    .invalidArgument,
                    "\(owner).setMaxConcurrentOperationCount(\(count)): use -1 (no limit) or 1…1,000,000. Fix: pass a positive count.")
            }
            try callLock.withLock {
                _ = try liveSession().query(
                    "UPDATE threadkit_queues SET max_concurrent = \(Int32(count)) WHERE id = \(queueID)",
                    what: "setting maxConcurrentOperationCount")
                _ = try liveSession().query("SELECT pg_notify('threadkit_ops', 'n ' || \(queueID))", what: "waking the workers")
            }
        }

        // MARK: Observing

        /// The queue's counts in one snapshot.
        public func statistics() throws -> TKPostgresQueueStatistics {
            try callLock.withLock {
                let rows = try liveSession().query(
                    """
                    SELECT count(*) FILTER (WHERE state = 'pending'),
                        count(*) FILTER (WHERE state = 'pending' AND deps_left = 0 AND not_before <= clock_timestamp()),
                        count(*) FILTER (WHERE state = 'running'),
                        count(*) FILTER (WHERE (state = 'pending' AND attempt > 0) OR (state = 'running' AND attempt > 1)),
                        count(*) FILTER (WHERE state = 'dead'),
                        count(*) FILTER (WHERE state = 'finished'),
                        count(*) FILTER (WHERE state = 'cancelled'),
                        (extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE state = 'pending')) * 1000000)::bigint
                    FROM threadkit_ops WHERE queue_id = \(queueID)
                    """, what: "reading the queue's statistics")
                guard let row = rows.first else { throw TKError(.protocolViolation, "\(owner): no statistics row.") }
                let (depth, ready, running, retried, dead, finished, cancelled, age) = try row.decode(
                    (Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64?).self)
                return TKPostgresQueueStatistics(
                    depth: Int(depth), ready: Int(ready), running: Int(running), retried: Int(retried), dead: Int(dead),
                    finished: Int(finished), cancelled: Int(cancelled), oldestPendingAge: age.map { .microseconds(max(0, $0)) })
            }
        }

        /// The queue's operations in id order, from `after` (exclusive), at most `limit`; `states`
        /// filters (nil: all).
        public func operations(states: [String]? = nil, after: Int64 = 0, limit: Int = 100) throws -> [TKPostgresOperationRecord] {
            try callLock.withLock {
                let filter = states ?? ["pending", "running", "finished", "cancelled", "dead"]
                let rows = try liveSession().query(
                    """
                    SELECT id, kind, state, priority::integer, attempt, max_attempts, token, worker, deps_left, barrier, cancel_requested,
                        last_error, created_at
                    FROM threadkit_ops WHERE queue_id = \(queueID) AND state = ANY(\(filter)) AND id > \(after)
                    ORDER BY id LIMIT \(Int32(clamping: max(0, limit)))
                    """, what: "listing the queue's operations")
                return try rows.map { row in
                    let (id, kind, state, priority, attempt, maxAttempts, token, worker, deps, barrier, cancelRequested, error, created) =
                        try row.decode((Int64, String, String, Int32, Int32, Int32, Int64, String?, Int32, Bool, Bool, String?, Date).self)
                    return TKPostgresOperationRecord(
                        id: id, kind: kind, state: state, priority: Int(priority), attempt: Int(attempt), maxAttempts: Int(maxAttempts),
                        token: token, worker: worker, openDependencies: Int(deps), isBarrier: barrier, cancelRequested: cancelRequested,
                        lastError: error, createdAt: created)
                }
            }
        }

        /// The outcome of operation `id` if it has ended, else nil. Throws when no such operation exists.
        public func outcome(of id: Int64) throws -> TKPostgresOperationOutcome? {
            try callLock.withLock {
                let rows = try liveSession().query(
                    "SELECT id, state, last_error, attempt, token FROM threadkit_ops WHERE id = \(id)", what: "reading operation \(id)")
                guard let row = rows.first else {
                    throw TKError(
                        .invalidArgument, "\(owner).outcome(of: \(id)): no such operation. Fix: pass an id that addOperation returned.")
                }
                return try Self.outcome(row)
            }
        }

        /// Decodes (id, state, last_error, attempt, token); nil when the state is not terminal.
        static func outcome(_ row: PostgresRow) throws -> TKPostgresOperationOutcome? {
            let (id, state, error, attempt, token) = try row.decode((Int64, String, String?, Int32, Int64).self)
            guard let terminal = TKPostgresOperationOutcome.State(rawValue: state) else { return nil }
            return TKPostgresOperationOutcome(id: id, state: terminal, lastError: error, attempts: Int(attempt), token: token)
        }

        /// Runs a statement on this object's session (for the watcher's and the worker's own queries
        /// use their sessions; this one serves the public calls). Caller holds `callLock`.
        private func liveSession() throws -> PostgresSession {
            if let session, !session.isClosed { return session }
            session?.close()
            let fresh = try PostgresSession.connect(configuration, owner: owner)
            session = fresh
            return fresh
        }
    }
#endif
