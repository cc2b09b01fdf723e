// SeriesTable: the series a TKMetricsExporter exports per queue, loop and lock name, and the cap on
// them. The first `limit` distinct (kind, name) pairs get series of their own; every later one is
// exported under name="other" of its kind, the first time said once on standard error. So each
// per-name metric has at most `limit` + 3 series (one `other` per kind), whatever the program
// names, and the factory's cost per new series (swift-prometheus copies a metric's label table
// for each one) is paid at most `limit` times per metric. Handles are made on first use: the
// counters and gauge by a report, the two Timers by a source's first timed item.
//
// Threads: any; `state` is guarded by its mutex, which is taken after the exporter's `lock` (in
// `report`) or alone (in `itemTimed`), never with a source's lock, and is held while the factory
// makes handles (order: exporter lock → table → the factory's locks).
import CoreMetrics
import Synchronization
import ThreadKit

final class SeriesTable: Sendable {
    /// One exported series: the handles of a (kind, label value).
    final class Series: @unchecked Sendable {
        // safety: `counters` and `timers` are read and written under the table's mutex only; the
        // handles handed out are thread-safe.
        let dimensions: [(String, String)]
        private var counters: Counters?
        private var timers: (latency: Timer, runTime: Timer)?

        init(kind: String, label: String) { dimensions = [("kind", kind), ("name", label)] }

        /// Caller holds the table's mutex.
        fileprivate func makeCounters(_ factory: any MetricsFactory) -> Counters {
            if let counters { return counters }
            let made = Counters(dimensions, factory: factory)
            counters = made
            return made
        }

        /// Caller holds the table's mutex.
        fileprivate func makeTimers(_ factory: any MetricsFactory) -> (latency: Timer, runTime: Timer) {
            if let timers { return timers }
            let made = (
                Timer(label: TKMetricsExporter.Name.latency, dimensions: dimensions, factory: factory),
                Timer(label: TKMetricsExporter.Name.runTime, dimensions: dimensions, factory: factory)
            )
            timers = made
            return made
        }
    }

    /// A series' counters and depth gauge. Immutable; the handles are thread-safe.
    final class Counters: Sendable {
        let items: Counter
        let depth: Gauge
        let waits: Counter
        let waitSeconds: FloatingPointCounter

        init(_ dimensions: [(String, String)], factory: any MetricsFactory) {
            items = Counter(label: TKMetricsExporter.Name.items, dimensions: dimensions, factory: factory)
            depth = Gauge(label: TKMetricsExporter.Name.depth, dimensions: dimensions, factory: factory)
            waits = Counter(label: TKMetricsExporter.Name.waits, dimensions: dimensions, factory: factory)
            waitSeconds = FloatingPointCounter(label: TKMetricsExporter.Name.waitSeconds, dimensions: dimensions, factory: factory)
        }
    }

    private struct Key: Hashable {
        let kind: String
        let label: String
    }

    private struct State {
        var series: [Key: Series] = [:]
        /// Names given series of their own (the `other` series are not counted).
        var ownNames = 0
        var warned = false
    }

    let limit: Int
    private let factory: any MetricsFactory
    private let state = Mutex(State())

    init(limit: Int, factory: any MetricsFactory) {
        self.limit = limit
        self.factory = factory
    }

    /// The counters of the series `kind`/`name` is exported under.
    func counters(kind: String, name: String) -> Counters {
        let (counters, warn) = state.withLock { s in
            let (series, warn) = Self.series(&s, kind, name, limit)
            return (series.makeCounters(factory), warn)
        }
        if warn { warnOnce(kind) }
        return counters
    }

    /// The Timers of the series `kind`/`name` is exported under.
    func timers(kind: String, name: String) -> (latency: Timer, runTime: Timer) {
        let (timers, warn) = state.withLock { s in
            let (series, warn) = Self.series(&s, kind, name, limit)
            return (series.makeTimers(factory), warn)
        }
        if warn { warnOnce(kind) }
        return timers
    }

    /// The series of `kind`/`name`: its own while fewer than `limit` names have one, else its
    /// kind's `other`. The flag: this is the first name sent to `other`. Caller holds the mutex.
    private static func series(_ s: inout State, _ kind: String, _ name: String, _ limit: Int) -> (Series, Bool) {
        if let own = s.series[Key(kind: kind, label: name)] { return (own, false) }
        if s.ownNames < limit {
            s.ownNames += 1
            let own = Series(kind: kind, label: name)
            s.series[Key(kind: kind, label: name)] = own
            return (own, false)
        }
        let key = Key(kind: kind, label: TKMetricsExporter.overflowLabel)
        let other = s.series[key] ?? Series(kind: kind, label: TKMetricsExporter.overflowLabel)
        s.series[key] = other
        defer { s.warned = true }
        return (other, !s.warned)
    }

    private func warnOnce(_ kind: String) {
        SystemCall.report(
            "ThreadKitMetrics: more than \(limit) queue, loop and lock names; the names past the first \(limit) "
                + "(from this \(kind) on) are exported as name=\"\(TKMetricsExporter.overflowLabel)\" "
                + "(TKMetricsExporter seriesLimit; docs/Metrics.md §3); said once")
    }
}
