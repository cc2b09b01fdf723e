// Contention: the contention counters (docs/Diagnostics.md §3). Locks call `start` before a wait
// and `lockWaited` after it, only on their slow (contended) paths; queues call `queueWaited` after
// a `sync` that had to wait, and wrap each `async` block with `timedBlock` to time its start. The uncontended paths
// never reach this file. Counters are kept per name (`TKLock "cache"`, `queue "com.app.io"`;
// unnamed locks of one kind share one row) in `rows`, guarded by `mutex` (a RawMutex leaf).
// The longest wait of each row keeps its call stack (captured when a wait breaks the row's record),
// so the row names where it waited (docs/Diagnostics.md §3, §7).
// The same waits feed the metrics (docs/Metrics.md) while `.metrics` is on: `start` times a wait
// when either feature is on, and each is recorded by the features on (Metrics.swift).
import Glibc

// safety: `rows` is read and written only under `mutex`, which is immutable.
final class Contention: @unchecked Sendable {
    static let shared = Contention()

    private let mutex = RawMutex()
    private var rows: [String: TKContentionCounters] = [:] // guarded by mutex

    /// The time a wait starts, or 0 when the counters and metrics are off (then `lockWaited` does
    /// nothing).
    @inline(__always)
    static func start() -> UInt64 {
        DiagnosticsSwitch.isOn(TKDiagnosticsFeature.contention.union(.metrics)) ? now() : 0
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// A lock's contended acquisition that began at `start` (from `start()`) has ended.
    @inline(__always)
    static func lockWaited(_ lock: LockName, kind: StaticString, since start: UInt64) {
        if start != 0 { shared.recordLock(lock, kind: kind, start: start) }
    }

    /// A `sync` onto `queue` that could not run at once waited from `start` until now.
    static func queueWaited(_ label: String, since start: UInt64) {
        guard start != 0 else { return }
        let waited = now() &- start
        if DiagnosticsSwitch.isOn(.contention) { shared.addWait(waited, row: queueRow(label)) }
        if DiagnosticsSwitch.isOn(.metrics) { Metrics.queueWaited(label, nanoseconds: waited) }
    }

    /// `work`, submitted to the queue labelled `queue` now, wrapped to count its enqueue-to-start
    /// latency when it starts. (The time travels in the closure, not in DispatchEntry, so entries
    /// keep their size whether counters are on or off.)
    @inline(never)
    static func timedBlock(_ work: @escaping @Sendable () -> Void, queue label: String) -> @Sendable () -> Void {
        let enqueued = now()
        return {
            shared.update(queueRow(label)) { $0.addLatency(now() &- enqueued) }
            work()
        }
    }

    private static func queueRow(_ label: String) -> String { "queue \"\(label)\"" }

    @inline(never)
    private func recordLock(_ lock: LockName, kind: StaticString, start: UInt64) {
        let waited = Contention.now() &- start
        if DiagnosticsSwitch.isOn(.metrics) { Metrics.lockWaited(lock, nanoseconds: waited) }
        guard DiagnosticsSwitch.isOn(.contention) else { return }
        let row = lock.name.map { "\(kind) \"\($0)\"" } ?? "\(kind) (unnamed)"
        addWait(waited, row: row)
    }

    /// Counts a wait; one longer than the row's longest so far also has its stack captured (here,
    /// outside the mutex, and kept if it is still the longest): a row's record is broken about
    /// ln(waits) times, so capturing costs nothing on waits that set no record.
    @inline(never)
    private func addWait(_ waited: UInt64, row: String) {
        var record = false
        update(row) { counters in
            record = counters.waits == 0 || Duration.nanoseconds(Int64(clamping: waited)) > counters.maxWait
            counters.addWait(waited)
        }
        guard record else { return }
        let stack = CallStack.capture(skipping: 0)
        let waitedFor = Duration.nanoseconds(Int64(clamping: waited))
        mutex.withLock {
            if rows[row]?.maxWait == waitedFor { rows[row]?.maxWaitStack = stack }
        }
    }

    private func update(_ row: String, _ change: (inout TKContentionCounters) -> Void) {
        mutex.withLock {
            var counters = rows[row] ?? TKContentionCounters(name: row)
            change(&counters)
            rows[row] = counters
        }
    }

    /// Every row, most total waiting first.
    var snapshot: [TKContentionCounters] {
        mutex.withLock { Array(rows.values) }.sorted { ($0.totalWait + $0.totalLatency) > ($1.totalWait + $1.totalLatency) }
    }

    func reset() { mutex.withLock { rows.removeAll() } }
}
