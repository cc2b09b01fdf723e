// MetricsTests: the core half of the metrics (docs/Metrics.md): exact item counts, 1-in-N timing
// with exact sample counts, depth, named loops and locks, the pool's workers, the sampling
// interval's validation, and nothing recorded while `.metrics` is off. Judged by the snapshot
// and by an observer that records every timed item. (The swift-metrics bridge and its histogram
// buckets: Tests/ThreadKitMetricsTests.)
import Glibc
import ThreadKit
import XCTest

final class MetricsTests: XCTestCase {
    /// Records every timed item of the sources whose name starts with `prefix`.
    final class Recorder: TKMetricsObserver, @unchecked Sendable {
        let prefix: String
        let items = Guarded<[(name: String, latency: Duration, runTime: Duration)]>([])
        init(_ prefix: String) { self.prefix = prefix }

        func itemTimed(_ source: TKMetricsSource, latency: Duration, runTime: Duration) {
            guard source.name.hasPrefix(prefix) else { return }
            items.withLock { $0.append((source.name, latency, runTime)) }
        }

        func count(_ name: String) -> Int { items.withLock { $0.filter { $0.name == name }.count } }
    }

    private var prefix = ""

    override func setUp() {
        super.setUp()
        prefix = "metrics-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-"
    }

    override func tearDown() {
        TKDiagnostics.disable(.metrics)
        TKMetrics.setObserver(nil)
        try? TKMetrics.setSamplingInterval(16)
        super.tearDown()
    }

    private func finish(_ group: TKDispatchGroup, _ what: String) {
        XCTAssertEqual(group.wait(until: .now + .seconds(60)), .success, "\(what) did not finish")
    }

    func testSamplingTimesOneInNAndKeepsCountsExact() throws {
        TKDiagnostics.enable(.metrics)
        let recorder = Recorder(prefix)
        TKMetrics.setObserver(recorder)
        for (interval, expected) in [(8, 125), (1, 1_000), (64, 16)] {
            try TKMetrics.setSamplingInterval(interval)
            XCTAssertEqual(TKMetrics.samplingInterval, interval)
            let name = prefix + "serial-\(interval)"
            let queue = TKDispatchQueue(label: name)
            let group = TKDispatchGroup()
            for _ in 0..<1_000 { queue.async(group: group) {} }
            finish(group, name)
            // Items 0, N, 2N, … of the one submitting thread: ⌈1000 / N⌉ timed, exactly.
            XCTAssertEqual(recorder.count(name), expected, "interval \(interval)")
            let row = try XCTUnwrap(TKMetrics.snapshot().row(.queue, name))
            XCTAssertEqual(row.items, 1_000)
            XCTAssertEqual(row.timed, expected)
            XCTAssertEqual(row.depth, 0)
            XCTAssertEqual(row.objects, 1)
            XCTAssertGreaterThanOrEqual(row.totalRunTime, .zero)
            XCTAssertGreaterThanOrEqual(row.maxLatency, .zero)
        }
        // A concurrent queue and a global queue count exactly too.
        try TKMetrics.setSamplingInterval(4)
        let concurrentName = prefix + "concurrent"
        let concurrent = TKDispatchQueue(label: concurrentName, attributes: .concurrent)
        let group = TKDispatchGroup()
        for _ in 0..<400 { concurrent.async(group: group) {} }
        finish(group, concurrentName)
        XCTAssertEqual(recorder.count(concurrentName), 100)
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, concurrentName)?.items, 400)
    }

    func testTimedItemsAreNeverEarly() throws {
        TKDiagnostics.enable(.metrics)
        try TKMetrics.setSamplingInterval(1)
        let recorder = Recorder(prefix)
        TKMetrics.setObserver(recorder)
        let name = prefix + "sleepy"
        let queue = TKDispatchQueue(label: name)
        let group = TKDispatchGroup()
        // A serial queue: item i starts after the i earlier 2 ms items, so its latency is at least
        // 2·i ms, and each runs at least 2 ms.
        for _ in 0..<20 { queue.async(group: group) { TKThread.sleep(for: .milliseconds(2)) } }
        finish(group, name)
        let items = recorder.items.withLock { $0 }
        XCTAssertEqual(items.count, 20)
        for item in items { XCTAssertGreaterThanOrEqual(item.runTime, .milliseconds(2)) }
        let latencies = items.map(\.latency).sorted()
        for (i, latency) in latencies.enumerated() { XCTAssertGreaterThanOrEqual(latency, .milliseconds(2 * i), "item \(i)") }
        let row = try XCTUnwrap(TKMetrics.snapshot().row(.queue, name))
        XCTAssertGreaterThanOrEqual(row.totalRunTime, .milliseconds(40))
        XCTAssertGreaterThanOrEqual(row.maxLatency, .milliseconds(38))
    }

    func testDepthIsWhatWaitsToStart() throws {
        TKDiagnostics.enable(.metrics)
        let name = prefix + "suspended"
        let queue = TKDispatchQueue(label: name)
        queue.suspend()
        let group = TKDispatchGroup()
        for _ in 0..<50 { queue.async(group: group) {} }
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.depth, 50)
        queue.resume()
        finish(group, name)
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.depth, 0)
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.items, 50)
    }

    func testNamedLoopsAreCountedUnnamedOnesAreNot() throws {
        TKDiagnostics.enable(.metrics)
        try TKMetrics.setSamplingInterval(2)
        let recorder = Recorder(prefix)
        TKMetrics.setObserver(recorder)
        let name = prefix + "loop"
        let named = NamedLoopThread(name)
        defer { named.stop() }
        let group = TKDispatchGroup()
        for _ in 0..<100 {
            group.enter()
            named.loop.perform { group.leave() }
        }
        finish(group, name)
        let row = try XCTUnwrap(TKMetrics.snapshot().row(.loop, name))
        XCTAssertEqual(row.items, 100)
        XCTAssertEqual(row.timed, 50)
        XCTAssertEqual(row.depth, 0)
        XCTAssertEqual(recorder.count(name), 50)
        // An unnamed TKThread's loop is not counted.
        let before = TKMetrics.snapshot().rows.filter { $0.kind == .loop }.count
        let thread = TKThread {
            let loop = TKRunLoop.current
            let done = TKDispatchGroup()
            done.enter()
            loop.perform { done.leave() }
            _ = loop.run(mode: .default, before: .now + .milliseconds(50))
            XCTAssertEqual(done.wait(until: .now), .success)
        }
        thread.start()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertEqual(TKMetrics.snapshot().rows.filter { $0.kind == .loop }.count, before)
    }

    func testContendedWaitsOfNamedLocksAreCounted() throws {
        TKDiagnostics.enable(.metrics)
        let name = prefix + "lock"
        let lock = TKLock()
        lock.name = name
        let unnamed = TKLock()
        lock.lock()
        unnamed.lock()
        // Another thread's timed lock fails its fast path (we hold the lock) and waits 5 ms.
        let waiter = TKThread {
            XCTAssertFalse(lock.lock(before: .now + .milliseconds(5)))
            XCTAssertFalse(unnamed.lock(before: .now + .milliseconds(5)))
        }
        waiter.start()
        XCTAssertTrue(waiter.join(until: .now + .seconds(30)))
        lock.unlock()
        unnamed.unlock()
        // Uncontended acquisitions are not waits.
        for _ in 0..<100 {
            lock.lock()
            lock.unlock()
        }
        let row = try XCTUnwrap(TKMetrics.snapshot().row(.lock, name))
        XCTAssertEqual(row.waits, 1)
        XCTAssertGreaterThanOrEqual(row.totalWait, .milliseconds(5))
        XCTAssertGreaterThanOrEqual(row.maxWait, .milliseconds(5))
        XCTAssertFalse(TKMetrics.snapshot().rows.contains { $0.kind == .lock && $0.name.isEmpty })
    }

    func testOffRecordsNothing() throws {
        TKDiagnostics.disable(.metrics)
        let recorder = Recorder(prefix)
        TKMetrics.setObserver(recorder)
        try TKMetrics.setSamplingInterval(1)
        let name = prefix + "off"
        let queue = TKDispatchQueue(label: name)
        let group = TKDispatchGroup()
        for _ in 0..<100 { queue.async(group: group) {} }
        finish(group, name)
        let loop = NamedLoopThread(name)
        defer { loop.stop() }
        for _ in 0..<10 {
            group.enter()
            loop.loop.perform { group.leave() }
        }
        finish(group, "loop")
        let lock = TKLock()
        lock.name = name
        lock.lock()
        let waiter = TKThread { XCTAssertFalse(lock.lock(before: .now + .milliseconds(2))) }
        waiter.start()
        XCTAssertTrue(waiter.join(until: .now + .seconds(30)))
        lock.unlock()
        let snapshot = TKMetrics.snapshot()
        XCTAssertFalse(snapshot.isCollecting)
        XCTAssertFalse(snapshot.rows.contains { $0.name == name }, "\(snapshot)")
        XCTAssertEqual(recorder.items.withLock { $0.count }, 0)
        // Switched on later, the queue starts counting from there.
        TKDiagnostics.enable(.metrics)
        for _ in 0..<10 { queue.async(group: group) {} }
        finish(group, name)
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.items, 10)
    }

    func testCountsOutliveTheirObjects() throws {
        TKDiagnostics.enable(.metrics)
        let name = prefix + "short-lived"
        for _ in 0..<3 {
            let group = TKDispatchGroup()
            let queue = TKDispatchQueue(label: name)
            for _ in 0..<10 { queue.async(group: group) {} }
            finish(group, name)
        }
        // Each queue is released once its lane has finished; its counts are folded, not lost.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { TKMetrics.snapshot().row(.queue, name)?.objects == 0 })
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.items, 30)
        XCTAssertEqual(TKMetrics.snapshot().row(.queue, name)?.depth, 0)
    }

    func testSamplingIntervalMustBeAPowerOfTwo() throws {
        try TKMetrics.setSamplingInterval(32)
        for bad in [0, -1, 3, 12, 1 << 21] {
            XCTAssertThrowsError(try TKMetrics.setSamplingInterval(bad)) { error in
                let error = error as? TKError
                XCTAssertEqual(error?.code, .invalidArgument)
                XCTAssertTrue(error?.message.contains("power of two") ?? false, "\(String(describing: error))")
            }
            XCTAssertEqual(TKMetrics.samplingInterval, 32, "a rejected interval changed the setting")
        }
    }

    func testWorkersByStateAddUpToThreads() {
        TKDiagnostics.enable(.metrics)
        let group = TKDispatchGroup()
        for _ in 0..<16 { TKDispatchQueue.global().async(group: group) {} }
        finish(group, "global")
        let snapshot = TKMetrics.snapshot()
        XCTAssertEqual(snapshot.workers.map(\.tier), ["normal", "background"])
        let normal = snapshot.workers[0]
        XCTAssertGreaterThanOrEqual(normal.threads, 1)
        for tier in snapshot.workers {
            XCTAssertEqual(tier.running + tier.blocked + tier.stalled + tier.idle, tier.threads, "\(tier)")
            XCTAssertLessThanOrEqual(tier.searching, tier.running)
        }
        XCTAssertTrue(snapshot.description.contains("pool normal tier: threads"), snapshot.description)
        XCTAssertEqual(TKDiagnostics.metricsSnapshot().workers.count, 2)
    }
}

/// A TKThread named `name` that runs its loop until `stop()` (loops are named by their TKThread).
final class NamedLoopThread: @unchecked Sendable {
    // safety: `loop` is written by the thread before `ready` is signalled, then only read.
    private(set) var loop: TKRunLoop!
    private let stopping = Guarded(false)
    private let thread: TKThread

    init(_ name: String) {
        let ready = TKDispatchSemaphore(value: 0)
        let box = Guarded<TKRunLoop?>(nil)
        let stopping = stopping
        thread = TKThread(name: name) {
            let loop = TKRunLoop.current
            let keepAlive = TKRunLoopSource(perform: {})
            loop.add(keepAlive, forMode: .default)
            box.withLock { $0 = loop }
            _ = ready.signal()
            while !stopping.withLock({ $0 }) { _ = loop.run(mode: .default, before: .now + .seconds(1)) }
            keepAlive.invalidate()
        }
        thread.start()
        ready.wait()
        loop = box.withLock { $0 }
    }

    func stop() {
        stopping.withLock { $0 = true }
        loop.perform { TKRunLoop.current.stop() }
        XCTAssertTrue(thread.join(until: .now + .seconds(30)), "loop thread did not stop")
    }
}
