// Metrics: the core half of the metrics (docs/Metrics.md): the hooks the queues, loops and locks
// call while `.metrics` is on, the per-object counters (`TKMetricsSource`), and the registry that
// snapshots them. The ThreadKitMetrics product reads them through TKMetrics (TKMetrics.swift).
//
// Hot paths, with `.metrics` on:
//   - `async` on a queue, `perform` on a named loop (the submitting thread): one relaxed
//     fetch-add on the source's `submittedCount` and a mask test; one item in `samplingInterval`
//     is wrapped in a closure that carries its enqueue time (DispatchEntry keeps its size).
//   - an item starting on a custom queue or a loop (the running thread): one relaxed fetch-add on
//     `startedCount` (the depth is submitted − started). Global queues count no starts: their
//     depth is the pool's run queue, polled.
//   - a timed item, after it ran: relaxed adds to the sums, a CAS loop for each maximum, the
//     observer's call.
//   - a contended lock or a `sync` that waited (slow paths only): relaxed adds, a CAS loop.
// No process-wide lock is taken per item: a source is found through its object (LockName's and
// TKRunLoop's `metrics`, a MetricsSlot: one acquiring load, no reference counting) and made once per
// object, which is when the registry's mutex is taken. The slot's deinit (its object's) marks the
// source gone, so the registry needs no reference to the object. The exception is a queue's `sync` wait, which finds the queue's source
// by label in the registry (a slow path that has just parked).
//
// Memory orderings: every counter is relaxed (statistics: a snapshot may see one counter a little
// ahead of another). The observer pointer is published with release and read with acquire.
// Lock order: the registry's mutex is a leaf (`snapshot` takes the pool's lock after releasing
// it); a source's exporter lock is a leaf for ThreadKit (exporters make metric handles under it).
import Glibc
import Synchronization

/// The counters of one named queue, run loop or lock, kept while `.metrics` is on and read by
/// ``TKMetrics/snapshot()``; an observer receives it with each timed item.
///
/// Exporters may keep their own per-source state (metric handles) with ``withExporterState(_:)``.
public final class TKMetricsSource: @unchecked Sendable {
    // safety: @unchecked because of `exporterState` (guarded by `exporterLock`); the rest is
    // immutable or atomic.

    /// What kind of object a source counts for.
    public enum Kind: String, Sendable, Hashable, Comparable {
        /// A `TKDispatchQueue`, by label.
        case queue
        /// A `TKRunLoop`, by the name of its thread (`main` for the main thread's).
        case loop
        /// A named lock (`TKLock`, `TKRecursiveLock`, `TKCondition`, `TKConditionLock`,
        /// `TKReadWriteLock`, `TKSpinLock`).
        case lock

        /// The kind named `rawValue` (`queue`, `loop`, `lock`: the `kind` label of the exported
        /// metrics), or nil. Written out for its documentation; it is what the compiler would
        /// synthesize.
        public init?(rawValue: String) {
            switch rawValue {
            case "queue": self = .queue
            case "loop": self = .loop
            case "lock": self = .lock
            default: return nil
            }
        }

        /// Queues, then loops, then locks.
        public static func < (a: Kind, b: Kind) -> Bool { a.order < b.order }
        private var order: Int {
            switch self {
            case .queue: 0
            case .loop: 1
            case .lock: 2
            }
        }
    }

    /// A queue, a run loop or a lock.
    public let kind: Kind
    /// The queue's label, the loop thread's name, the lock's name, as when the source was made.
    public let name: String
    /// False once the object counted is gone (its MetricsSlot's deinit), or from the start for a
    /// source made without an object (a `sync` wait on a queue whose source did not exist yet):
    /// the next snapshot folds its counts into the registry's totals.
    let alive: Atomic<Bool>
    /// Global queues: the pool level whose run queue is their depth.
    let rootLevel: Int?
    /// False for a loop whose thread had no name: it is not counted.
    let isRecorded: Bool

    // Written by submitting threads. Padded from the running threads' counters (64-byte lines).
    let submittedCount = Atomic<Int>(0)
    private let pad0: (Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0)
    // Written by running threads.
    let startedCount = Atomic<Int>(0)
    let timedCount = Atomic<Int>(0)
    let latencySum = Atomic<UInt64>(0)
    let latencyMax = Atomic<UInt64>(0)
    let runSum = Atomic<UInt64>(0)
    let runMax = Atomic<UInt64>(0)
    private let pad1: (Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0)
    // Written by waiting threads (slow paths).
    let waitCount = Atomic<Int>(0)
    let waitSum = Atomic<UInt64>(0)
    let waitMax = Atomic<UInt64>(0)

    private let exporterLock = RawMutex()
    private var exporterState: (any AnyObject & Sendable)? // guarded by exporterLock

    init(kind: Kind, name: String, hasObject: Bool = true, rootLevel: Int? = nil, isRecorded: Bool = true) {
        self.kind = kind
        self.name = name
        alive = Atomic(hasObject)
        self.rootLevel = rootLevel
        self.isRecorded = isRecorded
    }

    /// Runs `body` with this source's exporter state (nil at first) under the source's own lock,
    /// so an exporter can make its metric handles for the source once and find them again with
    /// each timed item. Keep `body` short: it must not block.
    public func withExporterState<R>(_ body: (inout (any AnyObject & Sendable)?) -> R) -> R {
        exporterLock.withLock { body(&exporterState) }
    }

    /// Whether the object counted is alive.
    var isAlive: Bool { alive.load(ordering: .relaxed) }

    // MARK: Items

    /// Counts one submitted item and returns `work`, or `work` wrapped to be timed (one in
    /// `samplingInterval`). Submitting thread.
    @inline(__always)
    func submitted(_ work: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let index = submittedCount.wrappingAdd(1, ordering: .relaxed).oldValue
        guard index & Metrics.sampleMask.load(ordering: .relaxed) == 0 else { return work }
        return timed(work)
    }

    @inline(never)
    private func timed(_ work: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let enqueued = Contention.now()
        return { [self] in
            let start = Contention.now()
            work()
            itemRan(latency: start &- enqueued, run: Contention.now() &- start)
        }
    }

    /// An item of a custom queue or a loop is starting (for the depth). Running thread.
    @inline(__always)
    func started() { startedCount.wrappingAdd(1, ordering: .relaxed) }

    private func itemRan(latency: UInt64, run: UInt64) {
        timedCount.wrappingAdd(1, ordering: .relaxed)
        latencySum.wrappingAdd(latency, ordering: .relaxed)
        runSum.wrappingAdd(run, ordering: .relaxed)
        Metrics.raise(latencyMax, to: latency)
        Metrics.raise(runMax, to: run)
        if let observer = Metrics.currentObserver() {
            observer.itemTimed(self, latency: .nanoseconds(Int64(clamping: latency)), runTime: .nanoseconds(Int64(clamping: run)))
        }
    }

    /// A contended wait on this lock or queue lasted `nanoseconds`.
    func waited(_ nanoseconds: UInt64) {
        waitCount.wrappingAdd(1, ordering: .relaxed)
        waitSum.wrappingAdd(nanoseconds, ordering: .relaxed)
        Metrics.raise(waitMax, to: nanoseconds)
    }

    /// Adds this source's counters to `row` (the depth is added by the snapshot).
    func add(to row: inout TKMetricsSnapshot.Row) {
        func duration(_ value: borrowing Atomic<UInt64>) -> Duration {
            .nanoseconds(Int64(clamping: value.load(ordering: .relaxed)))
        }
        row.items += submittedCount.load(ordering: .relaxed)
        row.timed += timedCount.load(ordering: .relaxed)
        row.totalLatency += duration(latencySum)
        row.maxLatency = max(row.maxLatency, duration(latencyMax))
        row.totalRunTime += duration(runSum)
        row.maxRunTime = max(row.maxRunTime, duration(runMax))
        row.waits += waitCount.load(ordering: .relaxed)
        row.totalWait += duration(waitSum)
        row.maxWait = max(row.maxWait, duration(waitMax))
    }

    /// Submitted and not started (custom queues, loops), never below 0: items submitted before
    /// `.metrics` went on may start while it is on.
    var unstarted: Int { max(0, submittedCount.load(ordering: .relaxed) - startedCount.load(ordering: .relaxed)) }
}

/// The hooks (docs/Metrics.md). Each is reached only behind `DiagnosticsSwitch.isOn(.metrics)`.
enum Metrics {
    /// `samplingInterval - 1`: an item whose index in its source has none of these bits is timed.
    static let sampleMask = Atomic<Int>(15)

    /// The address of the observer's box, retained for the life of the process (see
    /// `setObserver`), or 0. (An address as an integer: an Atomic of a pointer is not Sendable.)
    private static let observerBox = Atomic<UInt>(0)

    private final class ObserverBox: Sendable {
        let observer: any TKMetricsObserver
        init(_ observer: any TKMetricsObserver) { self.observer = observer }
    }

    static func setObserver(_ observer: (any TKMetricsObserver)?) {
        // safety: the box is retained here and never released: a thread that loaded the previous
        // pointer may still be calling its observer, and nothing tells us when it has finished.
        // One small box per installation (a rare, configuration-time call).
        let box = observer.map { UInt(bitPattern: Unmanaged.passRetained(ObserverBox($0)).toOpaque()) } ?? 0
        observerBox.store(box, ordering: .releasing)
    }

    static func currentObserver() -> (any TKMetricsObserver)? {
        guard let pointer = UnsafeRawPointer(bitPattern: observerBox.load(ordering: .acquiring)) else { return nil }
        // safety: boxes are never released (setObserver), so the pointer is valid.
        return Unmanaged<ObserverBox>.fromOpaque(pointer).takeUnretainedValue().observer
    }

    /// Stores `value` in `maximum` if larger (a relaxed CAS loop).
    static func raise(_ maximum: borrowing Atomic<UInt64>, to value: UInt64) {
        var current = maximum.load(ordering: .relaxed)
        while value > current {
            let (exchanged, original) = maximum.compareExchange(
                expected: current, desired: value, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    // MARK: Queues

    /// `async`'s hook, behind `isOn(.contention ∪ .metrics)`: the contention counters' timing
    /// wrapper (§3 of docs/Diagnostics.md) and the metrics' count and sample.
    @inline(never)
    static func observedBlock(_ work: @escaping @Sendable () -> Void, queue: TKDispatchQueue) -> @Sendable () -> Void {
        let block = DiagnosticsSwitch.isOn(.contention) ? Contention.timedBlock(work, queue: queue.label) : work
        guard DiagnosticsSwitch.isOn(.metrics) else { return block }
        return source(of: queue)._withUnsafeGuaranteedRef { $0.submitted(block) }
    }

    /// An entry of `queue` starts (DispatchEntry.runDiagnosed): counts a started block of a custom
    /// queue, for the depth.
    static func entryStarting(_ entry: borrowing DispatchEntry, on queue: TKDispatchQueue) {
        guard case .block = entry.work, !queue.isRoot, let source = queue.orderLabel.metrics.source else { return }
        source._withUnsafeGuaranteedRef { $0.started() }
    }

    @inline(__always)
    static func source(of queue: TKDispatchQueue) -> Unmanaged<TKMetricsSource> {
        queue.orderLabel.metrics.source ?? makeSource(of: queue)
    }

    @inline(never)
    private static func makeSource(of queue: TKDispatchQueue) -> Unmanaged<TKMetricsSource> {
        var level: Int?
        if case .root(let l) = queue.kind { level = l }
        return queue.orderLabel.metrics.install(TKMetricsSource(kind: .queue, name: queue.label, rootLevel: level))
    }

    /// A `sync` onto the queue labelled `label` waited `nanoseconds`.
    static func queueWaited(_ label: String, nanoseconds: UInt64) {
        MetricsRegistry.shared.queueWaited(label, nanoseconds: nanoseconds)
    }

    // MARK: Locks

    /// A contended acquisition of a named lock waited `nanoseconds` (unnamed locks are not counted).
    static func lockWaited(_ lock: LockName, nanoseconds: UInt64) {
        let source: Unmanaged<TKMetricsSource>
        if let existing = lock.metrics.source {
            source = existing
        } else {
            guard let name = lock.name else { return }
            source = lock.metrics.install(TKMetricsSource(kind: .lock, name: name))
        }
        source._withUnsafeGuaranteedRef { $0.waited(nanoseconds) }
    }

    // MARK: Loops

    /// A block for `loop` is being queued: counts it, and wraps one in `samplingInterval`. Loops
    /// whose thread has no name (when the first block arrives) are not counted.
    @inline(never)
    static func loopBlock(_ block: @escaping @Sendable () -> Void, loop: TKRunLoop) -> @Sendable () -> Void {
        let source = loop.metrics.source ?? makeSource(of: loop)
        return source._withUnsafeGuaranteedRef { $0.isRecorded ? $0.submitted(block) : block }
    }

    /// A block of `loop` starts (for the depth).
    static func loopBlockStarting(_ loop: TKRunLoop) {
        loop.metrics.source?._withUnsafeGuaranteedRef { if $0.isRecorded { $0.started() } }
    }

    @inline(never)
    private static func makeSource(of loop: TKRunLoop) -> Unmanaged<TKMetricsSource> {
        let name = loop.metricsName
        return loop.metrics.install(TKMetricsSource(kind: .loop, name: name ?? "", isRecorded: name != nil))
    }
}

/// Where a queue (through its LockName), a lock or a loop keeps its metrics source: the address of
/// a retained TKMetricsSource, or 0. Set once (compare-and-swap from 0), released and marked gone
/// by the deinit of the object that holds the slot. (Not an AtomicLazyReference: its `load` is not
/// specialized across the module boundary, and a generic metadata lookup per item costs more than
/// the metrics themselves.)
struct MetricsSlot: ~Copyable {
    private let word = Atomic<UInt>(0)

    init() {}

    deinit {
        // safety: the slot holds the one retain taken by `install`; nobody else releases it.
        guard let pointer = UnsafeRawPointer(bitPattern: word.load(ordering: .acquiring)) else { return }
        let source = Unmanaged<TKMetricsSource>.fromOpaque(pointer)
        source._withUnsafeGuaranteedRef { $0.alive.store(false, ordering: .relaxed) }
        source.release()
    }

    /// The source, if made. Acquiring: pairs with `install`'s publication (the source's fields).
    /// The holder keeps it alive while the caller uses the holder.
    @inline(__always)
    var source: Unmanaged<TKMetricsSource>? {
        // safety: a non-zero word is a source retained by this slot until its deinit.
        UnsafeRawPointer(bitPattern: word.load(ordering: .acquiring)).map { Unmanaged<TKMetricsSource>.fromOpaque($0) }
    }

    /// Publishes `made` unless another thread did first; the winner is registered once and
    /// returned.
    func install(_ made: TKMetricsSource) -> Unmanaged<TKMetricsSource> {
        let retained = Unmanaged.passRetained(made)
        let bits = UInt(bitPattern: retained.toOpaque())
        let (exchanged, original) = word.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing)
        guard exchanged else {
            retained.release()
            // safety: `original` is the winner's retained address (see `source`).
            return Unmanaged<TKMetricsSource>.fromOpaque(UnsafeRawPointer(bitPattern: original)!)
        }
        if made.isRecorded { MetricsRegistry.shared.register(made) }
        return retained
    }
}

/// Every source made so far, for snapshots. Sources of objects that are gone are folded into
/// `retired` (per kind and name), so the registry stays as large as the live objects and names.
final class MetricsRegistry: @unchecked Sendable {
    // safety: `live` and `retired` are guarded by `mutex`.
    static let shared = MetricsRegistry()

    private struct Key: Hashable {
        let kind: TKMetricsSource.Kind
        let name: String
    }

    private let mutex = RawMutex()
    private var live: [TKMetricsSource] = [] // guarded by mutex
    private var retired: [Key: TKMetricsSnapshot.Row] = [:] // guarded by mutex

    func register(_ source: TKMetricsSource) {
        mutex.withLock { live.append(source) }
    }

    /// Counts a `sync` wait on the queue labelled `label` into the source of a queue with that
    /// label, or else into an object-less one for it (made if need be, folded at the next
    /// snapshot). Under the mutex, so a fold never misses it.
    func queueWaited(_ label: String, nanoseconds: UInt64) {
        mutex.withLock {
            if let found = live.first(where: { $0.kind == .queue && $0.name == label }) { return found.waited(nanoseconds) }
            let made = TKMetricsSource(kind: .queue, name: label, hasObject: false)
            live.append(made)
            made.waited(nanoseconds)
        }
    }

    func snapshot() -> TKMetricsSnapshot {
        // Under the mutex: fold the sources whose object is gone into `retired`, take the rest.
        let (sources, retiredRows) = mutex.withLock { () -> ([TKMetricsSource], [Key: TKMetricsSnapshot.Row]) in
            var kept: [TKMetricsSource] = []
            for source in live {
                if source.isAlive {
                    kept.append(source)
                } else {
                    let key = Key(kind: source.kind, name: source.name)
                    source.add(to: &retired[key, default: TKMetricsSnapshot.Row(kind: source.kind, name: source.name)])
                }
            }
            live = kept
            return (kept, retired)
        }
        var rows = retiredRows
        let levels = Set(sources.compactMap(\.rootLevel))
        let runQueued = levels.isEmpty ? [:] : DispatchPool.shared.runQueueCounts(levels)
        for source in sources {
            let key = Key(kind: source.kind, name: source.name)
            var row = rows[key] ?? TKMetricsSnapshot.Row(kind: source.kind, name: source.name)
            source.add(to: &row)
            row.objects += 1
            if source.kind != .lock { row.depth += source.rootLevel.map { runQueued[$0] ?? 0 } ?? source.unstarted }
            rows[key] = row
        }
        let normal = DispatchPool.shared.snapshot(background: false)
        let background = DispatchPool.shared.snapshot(background: true)
        return TKMetricsSnapshot(
            rows: rows.values.sorted { ($0.kind, $0.name) < ($1.kind, $1.name) },
            workers: [Self.workers("normal", normal), Self.workers("background", background)],
            samplingInterval: TKMetrics.samplingInterval, isCollecting: DiagnosticsSwitch.isOn(.metrics))
    }

    private static func workers(_ tier: String, _ s: DispatchPool.Snapshot) -> TKMetricsSnapshot.Workers {
        TKMetricsSnapshot.Workers(
            tier: tier, threads: s.threads, running: s.running, blocked: s.blocked, stalled: s.stalled, idle: s.idle,
            searching: s.searching)
    }
}

extension DispatchPool {
    /// The jobs waiting in the run queues of `levels` (one visit to the pool's lock).
    func runQueueCounts(_ levels: Set<Int>) -> [Int: Int] {
        withPoolLock {
            var counts: [Int: Int] = [:]
            for level in levels { counts[level] = scheduler.runQueues.count(level) }
            return counts
        }
    }
}
