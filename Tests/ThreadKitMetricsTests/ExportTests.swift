// ExportTests: ThreadKitMetrics (docs/Metrics.md): a known workload (1,000 items with fixed
// sleeps) lands in the right buckets of swift-prometheus's histograms, sampling keeps the counts
// exact, an exporter that stopped exports nothing more, and the HTTP endpoint (a ThreadKit run-loop
// server) serves the page, read back over a plain socket. Judged by the Prometheus text page and by
// swift-metrics' own recording factory (MetricsTestKit).
import ChildProcessRoles
import Glibc
import MetricsTestKit
import Prometheus
import ThreadKit
import ThreadKitMetrics
import XCTest

final class ExportTests: XCTestCase {
    private var prefix = ""

    override func setUp() {
        super.setUp()
        prefix = "export-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-"
    }

    override func tearDown() {
        TKDiagnostics.disable(.metrics)
        TKMetrics.setObserver(nil)
        try? TKMetrics.setSamplingInterval(16)
        super.tearDown()
    }

    private func run(_ count: Int, on queue: TKDispatchQueue, sleep: @escaping @Sendable (Int) -> Duration) {
        let group = TKDispatchGroup()
        for i in 0..<count {
            let pause = sleep(i)
            queue.async(group: group) { if pause > .zero { TKThread.sleep(for: pause) } }
        }
        XCTAssertEqual(group.wait(until: .now + .seconds(120)), .success, "\(queue.label) did not finish")
    }

    /// 1,000 items on a serial queue; every tenth sleeps 6 ms. Every item is timed (interval 1).
    func testAKnownWorkloadLandsInTheRightBuckets() throws {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [.milliseconds(5), .milliseconds(100), .seconds(1), .seconds(10)]
        try TKMetrics.setSamplingInterval(1)
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: factory)
        defer { exporter.stop() }
        let name = prefix + "orders"
        let queue = TKDispatchQueue(label: name)
        run(1_000, on: queue) { $0 % 10 == 0 ? .milliseconds(6) : .zero }
        exporter.report()
        let samples = Exposition.parse(registry.emitToString())
        let labels = ["kind": "queue", "name": name]
        func bucket(_ metric: String, _ le: String) -> Double? {
            samples.value(metric + "_bucket", labels.merging(["le": le]) { a, _ in a })
        }
        let run = TKMetricsExporter.Name.runTime
        let latency = TKMetricsExporter.Name.latency
        XCTAssertEqual(samples.value(TKMetricsExporter.Name.items, labels), 1_000)
        XCTAssertEqual(samples.value(TKMetricsExporter.Name.depth, labels), 0)
        XCTAssertEqual(samples.value(run + "_count", labels), 1_000)
        XCTAssertEqual(bucket(run, "+Inf"), 1_000)
        XCTAssertEqual(samples.value(latency + "_count", labels), 1_000)
        // Run time, never early: the 100 items that slept 6 ms are above the 5 ms bucket.
        let runUnder5ms = try XCTUnwrap(bucket(run, "0.005"))
        XCTAssertLessThanOrEqual(runUnder5ms, 900)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(samples.value(run + "_sum", labels)), 100 * 0.006)
        // Latency, never early: item i waits for the ⌈i/10⌉ sleepers before it, 6 ms each. So only
        // item 0 can start within 5 ms, and at most items 0…160 (⌈i/10⌉ ≤ 16) within 100 ms.
        XCTAssertLessThanOrEqual(try XCTUnwrap(bucket(latency, "0.005")), 1)
        XCTAssertLessThanOrEqual(try XCTUnwrap(bucket(latency, "0.1")), 161)
        XCTAssertEqual(bucket(latency, "+Inf"), 1_000)
    }

    func testSamplingKeepsExportedCountsExact() throws {
        let metrics = TestMetrics()
        try TKMetrics.setSamplingInterval(8)
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: metrics)
        defer { exporter.stop() }
        let name = prefix + "sampled"
        run(1_000, on: TKDispatchQueue(label: name)) { _ in .zero }
        exporter.report()
        let dimensions = [("kind", "queue"), ("name", name)]
        XCTAssertEqual(try metrics.expectCounter(TKMetricsExporter.Name.items, dimensions).totalValue, 1_000)
        XCTAssertEqual(try metrics.expectTimer(TKMetricsExporter.Name.runTime, dimensions).values.count, 125)
        XCTAssertEqual(try metrics.expectTimer(TKMetricsExporter.Name.latency, dimensions).values.count, 125)
        XCTAssertEqual(try metrics.expectGauge(TKMetricsExporter.Name.depth, dimensions).lastValue, 0)
        // A second report adds nothing: counters grow by what happened since the last one.
        exporter.report()
        XCTAssertEqual(try metrics.expectCounter(TKMetricsExporter.Name.items, dimensions).totalValue, 1_000)
        // Workers by state, per tier, add up to the tier's threads.
        for tier in ["normal", "background"] {
            let threads = try XCTUnwrap(try metrics.expectGauge(TKMetricsExporter.Name.threads, [("tier", tier)]).lastValue)
            var sum = 0.0
            for state in ["running", "blocked", "stalled", "idle"] {
                sum += try XCTUnwrap(try metrics.expectGauge(TKMetricsExporter.Name.workers, [("tier", tier), ("state", state)]).lastValue)
            }
            XCTAssertEqual(sum, threads, tier)
        }
    }

    func testContendedLockWaitsAreExported() throws {
        let metrics = TestMetrics()
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: metrics)
        defer { exporter.stop() }
        let lock = TKLock()
        lock.name = prefix + "lock"
        lock.lock()
        let waiter = TKThread { XCTAssertFalse(lock.lock(before: .now + .milliseconds(3))) }
        waiter.start()
        XCTAssertTrue(waiter.join(until: .now + .seconds(30)))
        lock.unlock()
        exporter.report()
        let dimensions = [("kind", "lock"), ("name", prefix + "lock")]
        XCTAssertEqual(try metrics.expectCounter(TKMetricsExporter.Name.waits, dimensions).totalValue, 1)
    }

    func testAStoppedExporterRecordsNothing() throws {
        let metrics = TestMetrics()
        try TKMetrics.setSamplingInterval(1)
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: metrics)
        exporter.stop()
        XCTAssertFalse(TKDiagnostics.features.contains(.metrics), "stop() left .metrics on")
        let name = prefix + "after-stop"
        run(100, on: TKDispatchQueue(label: name)) { _ in .zero }
        exporter.report()
        XCTAssertTrue(metrics.timers(label: TKMetricsExporter.Name.runTime, dimensions: [("kind", "queue"), ("name", name)]).isEmpty)
        XCTAssertThrowsError(try metrics.expectCounter(TKMetricsExporter.Name.items, [("kind", "queue"), ("name", name)]))
    }

    func testTheEndpointServesThePageOverHTTP() throws {
        let registry = PrometheusCollectorRegistry()
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: PrometheusMetricsFactory(registry: registry))
        defer { exporter.stop() }
        let name = prefix + "served"
        run(10, on: TKDispatchQueue(label: name)) { _ in .zero }
        let endpoint = try TKMetricsHTTPEndpoint {
            exporter.report()
            return registry.emitToBuffer()
        }
        defer { endpoint.stop() }
        let (status, page) = try Exposition.get(port: endpoint.port, path: "/metrics")
        XCTAssertEqual(status, 200)
        XCTAssertEqual(Exposition.parse(page).value(TKMetricsExporter.Name.items, ["kind": "queue", "name": name]), 10)
        XCTAssertTrue(page.contains("# TYPE \(TKMetricsExporter.Name.runTime) histogram"), page)
        XCTAssertEqual(try Exposition.get(port: endpoint.port, path: "/other").status, 404)
        XCTAssertEqual(try Exposition.get(port: endpoint.port, path: "/metrics", method: "POST").status, 405)
        // Many requests in a row, each on its own connection.
        for _ in 0..<20 { XCTAssertEqual(try Exposition.get(port: endpoint.port, path: "/metrics").status, 200) }
    }

    func testTheEndpointRefusesAPortInUse() throws {
        let first = try TKMetricsHTTPEndpoint { [] }
        defer { first.stop() }
        XCTAssertThrowsError(try TKMetricsHTTPEndpoint(port: first.port) { [] }) { error in
            XCTAssertEqual((error as? TKError)?.errno, EADDRINUSE)
        }
    }
}
