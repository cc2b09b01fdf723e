// TKPostgresOperationRecord: one operation's row as TKPostgresOperationQueue.operations(…) lists
// it (for `threadkit-postgres queue NAME` and for monitoring). Immutable value.
#if Postgres
    import FoundationEssentials

    /// One operation of a queue, as stored.
    public struct TKPostgresOperationRecord: Sendable, Equatable {
        /// The operation's id.
        public let id: Int64
        /// Its registered kind.
        public let kind: String
        /// pending, running, finished, cancelled or dead.
        public let state: String
        /// Its queue priority's raw value (-8 … 8).
        public let priority: Int
        /// Runs so far, and the most allowed.
        public let attempt: Int
        /// The most runs allowed.
        public let maxAttempts: Int
        /// The fencing token of its latest run (0 before the first).
        public let token: Int64
        /// The worker that ran it last ("host pid N"), if any.
        public let worker: String?
        /// Dependencies not ended yet.
        public let openDependencies: Int
        /// Whether it is a barrier.
        public let isBarrier: Bool
        /// Whether a cancel was requested.
        public let cancelRequested: Bool
        /// The last error of a failed run.
        public let lastError: String?
        /// When it was added (server clock).
        public let createdAt: Date
    }
#endif
