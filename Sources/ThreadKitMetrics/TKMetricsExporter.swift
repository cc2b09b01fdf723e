// TKMetricsExporter: ThreadKit's metrics (TKMetrics, docs/Metrics.md) on apple/swift-metrics.
// Timed items go to swift-metrics Timers as they happen (the exporter is the core's
// TKMetricsObserver, called on the thread that ran the item); counters, depths and the pool's
// workers are polled from `TKMetrics.snapshot()` by a reporter thread every `interval`, or by
// `report()`. Per-name series are capped at `seriesLimit` names; the rest are exported under
// name="other" (SeriesTable).
//
// Threads: `start`, `stop`, `report` from any thread (`rows`, the worker gauges and whether
// `start` switched metrics on are guarded by `lock`; the thread is a `PeriodicReporter`); `itemTimed` on any thread (it touches the source's own exporter state, under the
// source's lock, the series table, under its mutex, never both at once, and the Timer handles,
// which are thread-safe). Lock order: `lock` → a source's lock → the factory's locks, and `lock` →
// the series table → the factory's locks.
import CoreMetrics
import Synchronization
import ThreadKit

/// Exports ThreadKit's per-queue, per-loop and per-lock metrics and the dispatch pool's workers
/// through a swift-metrics `MetricsFactory` (Prometheus, StatsD, OpenTelemetry, …).
///
/// ```swift
/// let registry = PrometheusCollectorRegistry()
/// var factory = PrometheusMetricsFactory(registry: registry)
/// factory.defaultDurationHistogramBuckets = TKMetricsExporter.suggestedBuckets
/// let exporter = TKMetricsExporter.start(interval: .seconds(5), factory: factory)
/// ```
///
/// What it exports (labels `kind` = queue, loop or lock, and `name`):
/// - `threadkit_item_latency_seconds` (Timer): enqueue-to-start latency of the timed items;
/// - `threadkit_item_run_seconds` (Timer): their run time;
/// - `threadkit_items_total` (Counter): items submitted, exact;
/// - `threadkit_depth` (Gauge): items waiting to start;
/// - `threadkit_contention_waits_total` (Counter) and `threadkit_contention_wait_seconds_total`
///   (FloatingPointCounter): contended waits of named locks and `sync` waits on queues;
/// - `threadkit_pool_workers` (Gauge, labels `tier` and `state`: running, blocked, stalled, idle,
///   searching) and `threadkit_pool_threads` (Gauge, label `tier`).
///
/// The first ``seriesLimit`` distinct names (1,000 by default) are exported under their own
/// `name`; later ones are added together under `name="other"` of their kind
/// (``overflowLabel``), and the first of them is reported once on standard error. So a program
/// that makes a queue per request cannot make the page, or the metrics backend, grow without
/// bound.
public final class TKMetricsExporter: TKMetricsObserver, @unchecked Sendable {
    // safety: @unchecked because of `rows`, `workerGauges` and `enabledMetrics`, guarded by `lock`;
    // `factory`, `interval`, `seriesLimit` and `series` are immutable (the table is thread-safe).

    /// The metric names, as listed in the type's overview.
    public enum Name {
        /// Timer: enqueue-to-start latency of timed items.
        public static let latency = "threadkit_item_latency_seconds"
        /// Timer: run time of timed items.
        public static let runTime = "threadkit_item_run_seconds"
        /// Counter: items submitted.
        public static let items = "threadkit_items_total"
        /// Gauge: items waiting to start.
        public static let depth = "threadkit_depth"
        /// Counter: contended waits.
        public static let waits = "threadkit_contention_waits_total"
        /// FloatingPointCounter: seconds spent in contended waits.
        public static let waitSeconds = "threadkit_contention_wait_seconds_total"
        /// Gauge: the pool's workers by tier and state.
        public static let workers = "threadkit_pool_workers"
        /// Gauge: the pool's threads by tier.
        public static let threads = "threadkit_pool_threads"
    }

    /// Histogram buckets that suit queue latencies and run times (10 µs to 10 s), for a factory
    /// whose defaults start at milliseconds (such as PrometheusMetricsFactory's).
    public static let suggestedBuckets: [Duration] = [
        .microseconds(10), .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
        .milliseconds(2500), .seconds(10),
    ]

    /// How many distinct queue, loop and lock names get series of their own by default.
    public static let defaultSeriesLimit = 1_000

    /// The `name` label value that names past ``seriesLimit`` are added together under.
    public static let overflowLabel = "other"

    /// The factory every metric is made with.
    public let factory: any MetricsFactory
    /// How often the reporter thread polls counters and gauges.
    public let interval: Duration
    /// How many distinct (kind, name) pairs get series of their own; the rest are exported under
    /// `name="other"` of their kind. Each per-name metric so has at most `seriesLimit` + 3 series.
    public let seriesLimit: Int

    /// One row's series (its own or its kind's `other`) and the counts already exported.
    private final class RowState {
        let series: SeriesTable.Counters
        var exportedItems = 0
        var exportedWaits = 0
        var exportedWait: Duration = .zero

        init(_ series: SeriesTable.Counters) { self.series = series }
    }

    /// A source's Timers, kept in its exporter state.
    private final class SourceTimers: Sendable {
        let exporter: ObjectIdentifier
        let latency: Timer
        let runTime: Timer

        init(exporter: ObjectIdentifier, latency: Timer, runTime: Timer) {
            self.exporter = exporter
            self.latency = latency
            self.runTime = runTime
        }
    }

    private let lock = Mutex<Void>(())
    private let series: SeriesTable
    private var rows: [String: RowState] = [:] // guarded by lock
    private var workerGauges: [String: Gauge] = [:] // guarded by lock
    private let reporter = PeriodicReporter(name: "threadkit-metrics-reporter")
    private var enabledMetrics = false // guarded by lock

    /// An exporter that records into `factory` (the one `MetricsSystem` was bootstrapped with when
    /// nil), polls every `interval`, and gives the first `seriesLimit` distinct names series of
    /// their own (0: every name goes to `other`). Nothing is exported until ``start()``. A
    /// negative `seriesLimit` stops the process with a message.
    public init(factory: (any MetricsFactory)? = nil, interval: Duration = .seconds(1), seriesLimit: Int) {
        guard seriesLimit >= 0 else {
            fatalError(
                "ThreadKit misuse: TKMetricsExporter(seriesLimit: \(seriesLimit)): the limit on per-name series must be 0 or more. "
                    + "Fix: pass the number of queue, loop and lock names to export on their own, or leave the default "
                    + "(\(Self.defaultSeriesLimit)).")
        }
        self.factory = factory ?? MetricsSystem.factory
        self.interval = interval
        self.seriesLimit = seriesLimit
        series = SeriesTable(limit: seriesLimit, factory: self.factory)
    }

    /// An exporter that records into `factory` (the one `MetricsSystem` was bootstrapped with when
    /// nil) and polls every `interval`, with the default limit on per-name series
    /// (``defaultSeriesLimit``). Nothing is exported until ``start()``.
    public convenience init(factory: (any MetricsFactory)? = nil, interval: Duration = .seconds(1)) {
        self.init(factory: factory, interval: interval, seriesLimit: TKMetricsExporter.defaultSeriesLimit)
    }

    /// Makes an exporter and starts it (``start()``), with the default limit on per-name series.
    @discardableResult
    public static func start(interval: Duration = .seconds(1), factory: (any MetricsFactory)? = nil) -> TKMetricsExporter {
        start(interval: interval, factory: factory, seriesLimit: defaultSeriesLimit)
    }

    /// Makes an exporter with `seriesLimit` (see ``init(factory:interval:seriesLimit:)``) and starts it.
    @discardableResult
    public static func start(
        interval: Duration = .seconds(1), factory: (any MetricsFactory)? = nil, seriesLimit: Int
    ) -> TKMetricsExporter {
        let exporter = TKMetricsExporter(factory: factory, interval: interval, seriesLimit: seriesLimit)
        exporter.start()
        return exporter
    }

    /// Switches `TKDiagnosticsFeature.metrics` on (if it was off), becomes the core's metrics
    /// observer (`TKMetrics.setObserver`), and starts the reporter thread
    /// (`threadkit-metrics-reporter`), which calls ``report()`` every ``interval``. Starting a started
    /// exporter does nothing. The core has one observer: run one exporter at a time (starting
    /// another replaces this one's observer, and stopping either removes it).
    public func start() {
        lock.withLock { _ in
            guard !reporter.isRunning else { return }
            if !TKDiagnostics.features.contains(.metrics) {
                TKDiagnostics.enable(.metrics)
                enabledMetrics = true
            }
            TKMetrics.setObserver(self)
            reporter.start(interval: interval) { [self] in report() }
        }
    }

    /// Stops the reporter thread (after one last ``report()``), stops observing, and switches
    /// `.metrics` off again if ``start()`` switched it on. Counters already exported stay.
    public func stop() {
        let wasEnabling = lock.withLock { _ -> Bool? in
            guard reporter.stop() else { return nil }
            defer { enabledMetrics = false }
            return enabledMetrics
        }
        guard let wasEnabling else { return }
        TKMetrics.setObserver(nil)
        if wasEnabling { TKDiagnostics.disable(.metrics) }
        report()
    }

    /// Polls `TKMetrics.snapshot()` now and brings every counter and gauge up to date: counters
    /// grow by what the core counted since the last report, gauges take the current depth and
    /// worker counts. The reporter thread calls it every ``interval``; call it yourself before
    /// reading the factory's output to see the latest counts.
    /// Names past ``seriesLimit`` add into their kind's `other` series: counters by their growth,
    /// the depth gauge as the sum of their depths.
    public func report() {
        let snapshot = TKMetrics.snapshot()
        lock.withLock { _ in
            // Depth per exported series: the sum over the rows exported under it.
            var depths: [ObjectIdentifier: (gauge: Gauge, depth: Int)] = [:]
            for row in snapshot.rows {
                let key = "\(row.kind.rawValue)\u{0}\(row.name)"
                let state = rows[key] ?? RowState(series.counters(kind: row.kind.rawValue, name: row.name))
                rows[key] = state
                let handles = state.series
                if row.kind != .lock {
                    if row.items > state.exportedItems { handles.items.increment(by: row.items - state.exportedItems) }
                    state.exportedItems = max(state.exportedItems, row.items)
                    depths[ObjectIdentifier(handles), default: (handles.depth, 0)].depth += row.depth
                }
                if row.waits > state.exportedWaits { handles.waits.increment(by: row.waits - state.exportedWaits) }
                state.exportedWaits = max(state.exportedWaits, row.waits)
                if row.totalWait > state.exportedWait {
                    handles.waitSeconds.increment(by: Self.seconds(row.totalWait - state.exportedWait))
                    state.exportedWait = row.totalWait
                }
            }
            for (gauge, depth) in depths.values { gauge.record(depth) }
            for tier in snapshot.workers {
                gauge(Name.threads, [("tier", tier.tier)]).record(tier.threads)
                for (state, count) in tier.byState {
                    gauge(Name.workers, [("tier", tier.tier), ("state", state)]).record(count)
                }
            }
        }
    }

    /// The gauge `label` with `dimensions`, made once. Caller holds `lock`.
    private func gauge(_ label: String, _ dimensions: [(String, String)]) -> Gauge {
        let key = label + dimensions.map { "\u{0}\($0.1)" }.joined()
        if let gauge = workerGauges[key] { return gauge }
        let gauge = Gauge(label: label, dimensions: dimensions, factory: factory)
        workerGauges[key] = gauge
        return gauge
    }

    /// Records a timed item into the Timers of the source's series (its own, or its kind's `other`
    /// past ``seriesLimit``; looked up on its first timed item and kept in the source). Called by
    /// ThreadKit on the thread that ran the item.
    public func itemTimed(_ source: TKMetricsSource, latency: Duration, runTime: Duration) {
        let me = ObjectIdentifier(self)
        let cached = source.withExporterState { state in (state as? SourceTimers).flatMap { $0.exporter == me ? $0 : nil } }
        let timers: SourceTimers
        if let cached {
            timers = cached
        } else {
            let made = series.timers(kind: source.kind.rawValue, name: source.name)
            timers = SourceTimers(exporter: me, latency: made.latency, runTime: made.runTime)
            source.withExporterState { $0 = timers }
        }
        timers.latency.recordNanoseconds(Self.nanoseconds(latency))
        timers.runTime.recordNanoseconds(Self.nanoseconds(runTime))
    }

    static func nanoseconds(_ d: Duration) -> Int64 {
        let (seconds, attoseconds) = d.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    static func seconds(_ d: Duration) -> Double {
        let (seconds, attoseconds) = d.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
