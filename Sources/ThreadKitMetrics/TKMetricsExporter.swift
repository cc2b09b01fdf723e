// TKMetricsExporter: ThreadKit's metrics (TKMetrics, docs/Metrics.md) on apple/swift-metrics.
// Timed items go to swift-metrics Timers as they happen (the exporter is the core's
// TKMetricsObserver, called on the thread that ran the item); counters, depths and the pool's
// workers are polled from `TKMetrics.snapshot()` by a reporter thread every `interval`, or by
// `report()`.
//
// Threads: `start`, `stop`, `report` from any thread (the reporter state is guarded by `lock`);
// `itemTimed` on any thread (it touches only the source's own exporter state, under the source's
// lock, and the Timer handles, which are thread-safe). Lock order: `lock` → a source's lock → the
// factory's locks.
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
public final class TKMetricsExporter: TKMetricsObserver, @unchecked Sendable {
    // safety: @unchecked because of the reporter state below, guarded by `lock`; `factory`,
    // `interval` and `names` are immutable.

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

    /// The factory every metric is made with.
    public let factory: any MetricsFactory
    /// How often the reporter thread polls counters and gauges.
    public let interval: Duration

    /// One row's handles and the counts already exported.
    private final class RowHandles {
        let items: Counter
        let depth: Gauge
        let waits: Counter
        let waitSeconds: FloatingPointCounter
        var exportedItems = 0
        var exportedWaits = 0
        var exportedWait: Duration = .zero

        init(_ row: TKMetricsSnapshot.Row, factory: any MetricsFactory) {
            let dimensions = [("kind", row.kind.rawValue), ("name", row.name)]
            items = Counter(label: Name.items, dimensions: dimensions, factory: factory)
            depth = Gauge(label: Name.depth, dimensions: dimensions, factory: factory)
            waits = Counter(label: Name.waits, dimensions: dimensions, factory: factory)
            waitSeconds = FloatingPointCounter(label: Name.waitSeconds, dimensions: dimensions, factory: factory)
        }
    }

    /// Set by `stop`; the reporter thread ends when it sees it.
    private final class StopFlag: Sendable {
        let value = Atomic<Bool>(false)
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
    private var rows: [String: RowHandles] = [:] // guarded by lock
    private var workerGauges: [String: Gauge] = [:] // guarded by lock
    private var reporter: TKThread? // guarded by lock
    private var wake: TKDispatchSemaphore? // guarded by lock
    private var stopping: StopFlag? // guarded by lock (its value: read by the reporter)
    private var enabledMetrics = false // guarded by lock

    /// An exporter that records into `factory` (the one `MetricsSystem` was bootstrapped with when
    /// nil) and polls every `interval`. Nothing is exported until ``start()``.
    public init(factory: (any MetricsFactory)? = nil, interval: Duration = .seconds(1)) {
        self.factory = factory ?? MetricsSystem.factory
        self.interval = interval
    }

    /// Makes an exporter and starts it (``start()``).
    @discardableResult
    public static func start(interval: Duration = .seconds(1), factory: (any MetricsFactory)? = nil) -> TKMetricsExporter {
        let exporter = TKMetricsExporter(factory: factory, interval: interval)
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
            guard reporter == nil else { return }
            if !TKDiagnostics.features.contains(.metrics) {
                TKDiagnostics.enable(.metrics)
                enabledMetrics = true
            }
            TKMetrics.setObserver(self)
            let wake = TKDispatchSemaphore(value: 0)
            let stopping = StopFlag()
            let interval = interval
            let thread = TKThread(name: "threadkit-metrics-reporter") { [self] in
                while !stopping.value.load(ordering: .acquiring) {
                    report()
                    _ = wake.wait(until: .now + interval)
                }
            }
            self.wake = wake
            self.stopping = stopping
            reporter = thread
            thread.start()
        }
    }

    /// Stops the reporter thread (after one last ``report()``), stops observing, and switches
    /// `.metrics` off again if ``start()`` switched it on. Counters already exported stay.
    public func stop() {
        let wasEnabling = lock.withLock { _ -> Bool? in
            guard let stopping, let wake, reporter != nil else { return nil }
            stopping.value.store(true, ordering: .releasing)
            _ = wake.signal()
            reporter = nil
            self.wake = nil
            self.stopping = nil
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
    public func report() {
        let snapshot = TKMetrics.snapshot()
        lock.withLock { _ in
            for row in snapshot.rows {
                let key = "\(row.kind.rawValue)\u{0}\(row.name)"
                let handles = rows[key] ?? RowHandles(row, factory: factory)
                rows[key] = handles
                if row.kind != .lock {
                    if row.items > handles.exportedItems { handles.items.increment(by: row.items - handles.exportedItems) }
                    handles.exportedItems = max(handles.exportedItems, row.items)
                    handles.depth.record(row.depth)
                }
                if row.waits > handles.exportedWaits { handles.waits.increment(by: row.waits - handles.exportedWaits) }
                handles.exportedWaits = max(handles.exportedWaits, row.waits)
                if row.totalWait > handles.exportedWait {
                    handles.waitSeconds.increment(by: Self.seconds(row.totalWait - handles.exportedWait))
                    handles.exportedWait = row.totalWait
                }
            }
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

    /// Records a timed item into the source's Timers (made on its first timed item). Called by
    /// ThreadKit on the thread that ran the item.
    public func itemTimed(_ source: TKMetricsSource, latency: Duration, runTime: Duration) {
        let me = ObjectIdentifier(self)
        let cached = source.withExporterState { state in (state as? SourceTimers).flatMap { $0.exporter == me ? $0 : nil } }
        let timers: SourceTimers
        if let cached {
            timers = cached
        } else {
            let dimensions = [("kind", source.kind.rawValue), ("name", source.name)]
            timers = SourceTimers(
                exporter: me, latency: Timer(label: Name.latency, dimensions: dimensions, factory: factory),
                runTime: Timer(label: Name.runTime, dimensions: dimensions, factory: factory))
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
