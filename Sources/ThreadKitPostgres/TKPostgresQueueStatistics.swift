// TKPostgresQueueStatistics: what TKPostgresOperationQueue.statistics() reads in one query, for
// monitoring: `threadkit-postgres queue NAME` prints it and ThreadKitMetrics' TKPostgresQueueMetrics
// exports it through swift-metrics. Immutable value.
#if Postgres
    /// A queue's state, counted in one snapshot of the database.
    public struct TKPostgresQueueStatistics: Sendable, Equatable {
        /// Operations not started yet (ready, scheduled for later, waiting for dependencies or retrying).
        public let depth: Int
        /// Of `depth`, those that can start now (no open dependency, not scheduled for later).
        public let ready: Int
        /// Operations running now (holding a lease).
        public let running: Int
        /// Open operations that ran before and failed (waiting to run again, or running again).
        public let retried: Int
        /// Operations whose attempts were spent (dead letters, with their error).
        public let dead: Int
        /// Operations that finished.
        public let finished: Int
        /// Operations that were cancelled.
        public let cancelled: Int
        /// How long the oldest operation not started yet has waited; nil when `depth` is 0.
        public let oldestPendingAge: Duration?
    }
#endif
