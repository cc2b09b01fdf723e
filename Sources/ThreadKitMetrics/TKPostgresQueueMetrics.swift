// TKPostgresQueueMetrics: TKPostgresOperationQueues' state (ThreadKitPostgres) on apple/swift-metrics.
// Each queue's depth, ready, running, retried and dead operations and the age of its oldest waiting
// one are Gauges, its finished and cancelled operations Counters, all with the dimension
// name = the queue's name. A reporter thread reads every queue's `statistics()` (one query each, on
// the queue's own session) every `interval`; `report()` does it at once. The figures are the ones
// `threadkit-postgres queue NAME` prints: both come from `TKPostgresOperationQueue.statistics()`.
//
// Why ThreadKitMetrics carries this bridge and not ThreadKitPostgres: swift-metrics is already
// ThreadKitMetrics' dependency and its metric names and labels are defined here, while
// ThreadKitPostgres stays on PostgresNIO alone, so a program that uses the queue without exporting
// metrics links no swift-metrics. The dependency on ThreadKitPostgres is conditional on the
// `Postgres` trait (Package.swift), and this file is `#if Postgres`: without the trait
// ThreadKitMetrics builds no SwiftNIO and no PostgresNIO; with it, the package that asked for the
// trait already builds them. `ThreadKit` itself keeps no package dependency either way.
//
// Threads: `start`, `stop` and `report` from any thread. The reporter thread is a
// `PeriodicReporter` (its own lock, never held across a query); reports are serialized by
// `reportLock`, held across the queries (so the counters' baselines in `handles` are read and
// written by one report at a time). The swift-metrics handles are thread-safe.
#if Postgres
    import CoreMetrics
    import Synchronization
    import ThreadKit
    import ThreadKitPostgres

    /// Exports the state of `TKPostgresOperationQueue`s through a swift-metrics `MetricsFactory`,
    /// read from the database every ``interval``.
    ///
    /// ```swift
    /// let orders = try TKPostgresOperationQueue(name: "orders")
    /// let metrics = TKPostgresQueueMetrics.start(queues: [orders], interval: .seconds(10), factory: factory)
    /// ```
    ///
    /// What it exports (label `name`: the queue's name):
    /// - `threadkit_postgres_queue_depth` (Gauge): operations not started yet;
    /// - `threadkit_postgres_queue_ready` (Gauge): of those, the ones that can start now;
    /// - `threadkit_postgres_queue_running` (Gauge): operations holding a lease;
    /// - `threadkit_postgres_queue_retried` (Gauge): open operations that failed before;
    /// - `threadkit_postgres_queue_dead` (Gauge): dead letters (attempts spent);
    /// - `threadkit_postgres_queue_oldest_age_seconds` (Gauge): how long the oldest operation not
    ///   started yet has waited (0 when none waits);
    /// - `threadkit_postgres_queue_finished_total` and `threadkit_postgres_queue_cancelled_total`
    ///   (Counters): operations that finished, were cancelled;
    /// - `threadkit_postgres_queue_read_errors_total` (Counter): reports whose query failed (the
    ///   gauges then keep their last values).
    ///
    /// Every process that exports the same queue reports the same figures: they are the database's,
    /// not the process's.
    public final class TKPostgresQueueMetrics: @unchecked Sendable {
        // safety: @unchecked because of `handles`' baselines and `warned`, guarded by `reportLock`;
        // the rest is immutable or Sendable (`reporter`).

        /// The metric names, as listed in the type's overview.
        public enum Name {
            /// Gauge: operations not started yet.
            public static let depth = "threadkit_postgres_queue_depth"
            /// Gauge: operations not started yet that can start now.
            public static let ready = "threadkit_postgres_queue_ready"
            /// Gauge: operations running (holding a lease).
            public static let running = "threadkit_postgres_queue_running"
            /// Gauge: open operations that ran before and failed.
            public static let retried = "threadkit_postgres_queue_retried"
            /// Gauge: dead operations (attempts spent).
            public static let dead = "threadkit_postgres_queue_dead"
            /// Gauge: seconds the oldest operation not started yet has waited.
            public static let oldestAge = "threadkit_postgres_queue_oldest_age_seconds"
            /// Counter: finished operations.
            public static let finished = "threadkit_postgres_queue_finished_total"
            /// Counter: cancelled operations.
            public static let cancelled = "threadkit_postgres_queue_cancelled_total"
            /// Counter: reports whose statistics query failed.
            public static let readErrors = "threadkit_postgres_queue_read_errors_total"
        }

        /// The queues exported, one per name (a second object of a name already listed is left out).
        public let queues: [TKPostgresOperationQueue]
        /// The factory every metric is made with.
        public let factory: any MetricsFactory
        /// How often the reporter thread reads the queues' statistics.
        public let interval: Duration

        /// One queue's handles and the counts already added to its counters.
        private final class Handles {
            let depth, ready, running, retried, dead, oldestAge: Gauge
            let finished, cancelled, readErrors: Counter
            var exportedFinished = 0
            var exportedCancelled = 0

            init(_ name: String, _ factory: any MetricsFactory) {
                let dimensions = [("name", name)]
                depth = Gauge(label: Name.depth, dimensions: dimensions, factory: factory)
                ready = Gauge(label: Name.ready, dimensions: dimensions, factory: factory)
                running = Gauge(label: Name.running, dimensions: dimensions, factory: factory)
                retried = Gauge(label: Name.retried, dimensions: dimensions, factory: factory)
                dead = Gauge(label: Name.dead, dimensions: dimensions, factory: factory)
                oldestAge = Gauge(label: Name.oldestAge, dimensions: dimensions, factory: factory)
                finished = Counter(label: Name.finished, dimensions: dimensions, factory: factory)
                cancelled = Counter(label: Name.cancelled, dimensions: dimensions, factory: factory)
                readErrors = Counter(label: Name.readErrors, dimensions: dimensions, factory: factory)
            }
        }

        private let reporter = PeriodicReporter(name: "threadkit-postgres-queue-metrics")
        private let reportLock = TKLock()
        private let handles: [Handles] // baselines guarded by reportLock
        private var warned = false // guarded by reportLock

        /// Exports `queues` into `factory` (the one `MetricsSystem` was bootstrapped with when nil),
        /// reading them every `interval` once started (``start()``). Makes the handles at once, so
        /// the series exist (at 0) before the first report.
        public init(queues: [TKPostgresOperationQueue], factory: (any MetricsFactory)? = nil, interval: Duration = .seconds(10)) {
            var seen: Set<String> = []
            let unique = queues.filter { seen.insert($0.name).inserted }
            let factory = factory ?? MetricsSystem.factory
            self.queues = unique
            self.factory = factory
            self.interval = interval
            handles = unique.map { Handles($0.name, factory) }
        }

        /// Makes an exporter of `queues` and starts it (``start()``).
        @discardableResult
        public static func start(
            queues: [TKPostgresOperationQueue], interval: Duration = .seconds(10), factory: (any MetricsFactory)? = nil
        ) -> TKPostgresQueueMetrics {
            let metrics = TKPostgresQueueMetrics(queues: queues, factory: factory, interval: interval)
            metrics.start()
            return metrics
        }

        /// Starts the reporter thread (`threadkit-postgres-queue-metrics`), which calls ``report()``
        /// every ``interval`` until ``stop()`` (a failed read is counted in
        /// `threadkit_postgres_queue_read_errors_total` and said once on standard error). The thread
        /// keeps this object alive: stop it when done. Starting a started exporter does nothing.
        public func start() {
            reporter.start(interval: interval) { [self] in _ = try? report() }
        }

        /// Stops the reporter thread; a report it is making finishes. Values already exported stay.
        public func stop() { reporter.stop() }

        /// Reads every queue's statistics now and brings its gauges and counters up to date
        /// (counters grow by the difference since the last report); returns what it read, by queue
        /// name. A queue whose read fails keeps its last values and counts a read error; the first
        /// error is thrown after every queue was tried.
        @discardableResult
        public func report() throws -> [String: TKPostgresQueueStatistics] {
            try reportLock.withLock {
                var read: [String: TKPostgresQueueStatistics] = [:]
                var firstError: (any Error)?
                for (queue, handles) in zip(queues, handles) {
                    let statistics: TKPostgresQueueStatistics
                    do { statistics = try queue.statistics() } catch {
                        handles.readErrors.increment()
                        if firstError == nil { firstError = error }
                        if !warned {
                            warned = true
                            SystemCall.report(
                                "ThreadKitMetrics: reading the statistics of TKPostgresOperationQueue \"\(queue.name.prefix(64))\" failed: "
                                    + "\(error); counted in \(Name.readErrors) (said once)")
                        }
                        continue
                    }
                    read[queue.name] = statistics
                    handles.depth.record(statistics.depth)
                    handles.ready.record(statistics.ready)
                    handles.running.record(statistics.running)
                    handles.retried.record(statistics.retried)
                    handles.dead.record(statistics.dead)
                    handles.oldestAge.record(TKMetricsExporter.seconds(statistics.oldestPendingAge ?? .zero))
                    if statistics.finished > handles.exportedFinished {
                        handles.finished.increment(by: statistics.finished - handles.exportedFinished)
                    }
                    handles.exportedFinished = max(handles.exportedFinished, statistics.finished)
                    if statistics.cancelled > handles.exportedCancelled {
                        handles.cancelled.increment(by: statistics.cancelled - handles.exportedCancelled)
                    }
                    handles.exportedCancelled = max(handles.exportedCancelled, statistics.cancelled)
                }
                if let firstError { throw firstError }
                return read
            }
        }
    }
#endif
