// TKMetrics: the public face of the metrics (docs/Metrics.md): the sampling interval, the observer
// that receives each timed item, and snapshots of every named queue, loop and lock with the
// dispatch pool's workers by state. The ThreadKitMetrics product bridges these to swift-metrics;
// the core has no dependency. Thread-safe: every member may be called from any thread.
//
// Per-object state lives in `TKMetricsSource` (lock-free counters, Metrics.swift); the registry's
// mutex is taken once per object (when its source is made) and by `snapshot()`, never per item.

/// Per-queue, per-loop and per-lock metrics, collected while `TKDiagnosticsFeature.metrics` is on
/// (`TK_DIAGNOSTICS=metrics`, or `TKDiagnostics.enable(.metrics)`; docs/Metrics.md).
///
/// Every `async` block of a queue and every `perform` block of a named thread's run loop is
/// counted exactly; one in ``samplingInterval`` of them (per source and per submitting thread's
/// order of submission) is timed: its enqueue-to-start latency and its run time. Contended waits
/// of named locks and `sync` calls that waited for a queue are counted every time. Read it all with
/// ``snapshot()``, or receive each timed item with ``setObserver(_:)``.
public enum TKMetrics {
    /// One in this many items of each queue and loop is timed (a power of two; 16 by default).
    /// The first item of each source is always timed, then every `samplingInterval`-th.
    public static var samplingInterval: Int { Metrics.sampleMask.load(ordering: .relaxed) + 1 }

    /// Sets ``samplingInterval``: 1 times every item, larger powers of two bound the cost (one
    /// timed item costs two clock reads and an allocation). Applies to items submitted from now on.
    ///
    /// - Throws: `TKError` with code `.invalidArgument`, and changes nothing, when `interval` is
    ///   not a power of two between 1 and 1,048,576.
    public static func setSamplingInterval(_ interval: Int) throws(TKError) {
        guard interval >= 1, interval <= 1 << 20, interval & (interval - 1) == 0 else {
            throw TKError(
                .invalidArgument,
                "TKMetrics.setSamplingInterval(\(interval)): the interval must be a power of two from 1 to 1048576, "
                    + "so that sampling is one mask test per item. Fix: pass 1, 2, 4, … (e.g. 16).")
        }
        Metrics.sampleMask.store(interval - 1, ordering: .relaxed)
    }

    /// Installs `observer` (nil removes it). It is called for each timed item after the item ran,
    /// on the thread that ran it, so it must be quick and must not block. An observer once
    /// installed is kept for the life of the process (a thread may still be calling it).
    public static func setObserver(_ observer: (any TKMetricsObserver)?) {
        Metrics.setObserver(observer)
    }

    /// Every named queue, loop and lock seen while metrics were on (sources of one kind and name,
    /// such as two queues with one label, are added together; objects gone keep their counts), and
    /// the dispatch pool's workers by state. Costs a visit to the registry's mutex and three to the
    /// pool's lock (the run queues of the global queues, then each tier's workers).
    public static func snapshot() -> TKMetricsSnapshot {
        MetricsRegistry.shared.snapshot()
    }
}

extension TKDiagnostics {
    /// The metrics collected while `.metrics` is on (``TKMetrics/snapshot()``).
    public static func metricsSnapshot() -> TKMetricsSnapshot { TKMetrics.snapshot() }
}

/// Receives each timed item of every named queue and loop (``TKMetrics/setObserver(_:)``).
public protocol TKMetricsObserver: AnyObject, Sendable {
    /// A timed item of `source` has run: it started `latency` after it was submitted and ran for
    /// `runTime`. Called on the thread that ran it, right after it returned.
    func itemTimed(_ source: TKMetricsSource, latency: Duration, runTime: Duration)
}

/// What metrics know of the dispatch pool and its objects at one instant (``TKMetrics/snapshot()``).
public struct TKMetricsSnapshot: Sendable, CustomStringConvertible {
    /// One named queue, loop or lock (all sources of that kind and name added together).
    public struct Row: Sendable, Hashable, CustomStringConvertible {
        /// A queue, a run loop or a lock.
        public let kind: TKMetricsSource.Kind
        /// The queue's label, the loop thread's name (`main` for the main loop), the lock's name.
        public let name: String
        /// Objects of this kind and name alive now.
        public internal(set) var objects = 0
        /// Items submitted (queues: `async` blocks; loops: `perform` blocks and requests), exact.
        public internal(set) var items = 0
        /// Items waiting to start now: submitted and not started (for global queues, the jobs in
        /// the pool's run queue of their QoS). Polled when the snapshot is taken.
        public internal(set) var depth = 0
        /// Items timed (one in ``TKMetrics/samplingInterval`` of `items`).
        public internal(set) var timed = 0
        /// Enqueue-to-start latency of the timed items, all together.
        public internal(set) var totalLatency: Duration = .zero
        /// The longest of those latencies.
        public internal(set) var maxLatency: Duration = .zero
        /// Run time of the timed items, all together.
        public internal(set) var totalRunTime: Duration = .zero
        /// The longest of those run times.
        public internal(set) var maxRunTime: Duration = .zero
        /// Contended waits: acquisitions of the lock that could not take it at once; for a queue,
        /// `sync` calls that had to wait for it. Exact.
        public internal(set) var waits = 0
        /// Time spent in those waits, all together.
        public internal(set) var totalWait: Duration = .zero
        /// The longest of those waits.
        public internal(set) var maxWait: Duration = .zero

        init(kind: TKMetricsSource.Kind, name: String) {
            self.kind = kind
            self.name = name
        }

        /// `queue "io": items 1000, depth 0, timed 63 (latency mean 12.0 µs, max …), waits 0`.
        public var description: String {
            var text = "\(kind) \"\(name)\": "
            if kind != .lock {
                text += "items \(items), depth \(depth), timed \(timed)"
                if timed > 0 {
                    text +=
                        " (latency mean \(TKContentionCounters.format(totalLatency / timed)), max \(TKContentionCounters.format(maxLatency)); "
                        + "run mean \(TKContentionCounters.format(totalRunTime / timed)), max \(TKContentionCounters.format(maxRunTime)))"
                }
                text += ", "
            }
            text += "waits \(waits)"
            if waits > 0 { text += " (total \(TKContentionCounters.format(totalWait)), max \(TKContentionCounters.format(maxWait)))" }
            return text
        }
    }

    /// The dispatch pool's workers of one tier, by state (they add up to `threads`).
    public struct Workers: Sendable, Hashable {
        /// `normal` (every QoS but background) or `background`.
        public let tier: String
        /// Live worker threads, and those about to start.
        public let threads: Int
        /// Running a job, or between jobs, or looking for one.
        public let running: Int
        /// Parked in a ThreadKit wait inside a job (another worker may take their place).
        public let blocked: Int
        /// Found by the pool's monitor blocked outside ThreadKit inside a job.
        public let stalled: Int
        /// Parked with nothing to do.
        public let idle: Int
        /// Of the running ones, those woken or started that have not found their job yet.
        public let searching: Int

        /// The states and their counts, in a fixed order, for exporters: running, blocked,
        /// stalled, idle, searching.
        public var byState: [(state: String, count: Int)] {
            [("running", running), ("blocked", blocked), ("stalled", stalled), ("idle", idle), ("searching", searching)]
        }
    }

    /// Every named queue, loop and lock, sorted by kind, then name.
    public let rows: [Row]
    /// The pool's two tiers: `normal`, then `background`.
    public let workers: [Workers]
    /// ``TKMetrics/samplingInterval`` when the snapshot was taken.
    public let samplingInterval: Int
    /// Whether `.metrics` was on when the snapshot was taken.
    public let isCollecting: Bool

    /// The row of `kind` named `name`, if metrics saw one.
    public func row(_ kind: TKMetricsSource.Kind, _ name: String) -> Row? {
        rows.first { $0.kind == kind && $0.name == name }
    }

    /// One line per row, then the workers of each tier.
    public var description: String {
        var lines = ["ThreadKit metrics: \(isCollecting ? "on" : "off"), 1 in \(samplingInterval) items timed"]
        lines += rows.map { "  \($0)" }
        for w in workers {
            lines.append(
                "  pool \(w.tier) tier: threads \(w.threads), " + w.byState.map { "\($0.state) \($0.count)" }.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }
}
