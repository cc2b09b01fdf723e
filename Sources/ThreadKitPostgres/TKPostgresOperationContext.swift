// TKPostgresOperationContext: what a handler of a TKPostgresOperationQueue kind knows about the run
// it is in: the operation's id, the lease's fencing token, the attempt, whether a cancel was
// requested or the lease was lost (`isCancelled`), and fenced writes (exactly-once side effects:
// a write with this run's token is refused once a later run, with a higher token, has written).
//
// Threads: the handler's thread reads it; the worker's threads set `cancelled`/`leaseLost` (atomics).
#if Postgres
    import PostgresNIO
    import ThreadKit

    /// The run a handler is in.
    // safety: the flags are atomics; every other member is immutable; `effects` is a @Sendable closure.
    public final class TKPostgresOperationContext: @unchecked Sendable {
        /// The operation's id (the same on every host).
        public let operationID: Int64
        /// The lease's fencing token: strictly greater than every earlier run's of this operation.
        public let token: Int64
        /// Which run this is (1 for the first).
        public let attempt: Int
        /// The operation's kind.
        public let kind: String
        private let cancelled = TKAtomicInt64(0)
        private let lost = TKAtomicInt64(0)
        private let effects: @Sendable () throws -> PostgresSession

        init(operationID: Int64, token: Int64, attempt: Int, kind: String, effects: @escaping @Sendable () throws -> PostgresSession) {
            self.operationID = operationID
            self.token = token
            self.attempt = attempt
            self.kind = kind
            self.effects = effects
        }

        /// True once the operation was cancelled (`cancel`, `cancelAllOperations`, from any host), its
        /// worker is shutting down, or its lease was lost: the handler should stop soon.
        public var isCancelled: Bool { cancelled.load() != 0 || lost.load() != 0 }

        /// True once this run's lease is known lost (another run may have started with a higher token).
        public var isLeaseLost: Bool { lost.load() != 0 }

        func markCancelled() { cancelled.store(1) }
        func markLeaseLost() { lost.store(1) }

        /// Writes `value` to the fenced resource `resource` (TKPostgresFencedStore's table) with this
        /// run's token: refused with `.notLockOwner` when a run with a higher token has written it, so
        /// a stale run (paused, cut off, its lease expired) cannot overwrite a later run's effect.
        public func fencedWrite(_ value: String, resource: String) throws {
            let resource = LockSchema.normalized(resource)
            let written = try LockSchema.fencedWrite(
                value, resource: resource, token: token, try effects(),
                what: "a fenced write of operation \(operationID) with token \(token)")
            if !written {
                markLeaseLost()
                throw TKError(
                    .notLockOwner,
                    "operation \(operationID): the fenced write to \"\(resource.prefix(64))\" with token \(token) was refused: a later run "
                        + "(higher token) has written it. Fix: stop this run; the later one owns the operation.")
            }
        }
    }
#endif
