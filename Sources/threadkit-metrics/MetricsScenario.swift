// MetricsScenario: metrics-prometheus. A known workload runs on named queues, a named thread's
// run loop and a named lock while `.metrics` is on; TKMetricsExporter feeds swift-metrics with
// swift-prometheus's PrometheusMetricsFactory; a TKMetricsHTTPEndpoint (a ThreadKit run-loop
// server) serves the exposition page on 127.0.0.1, and the scenario reads it back over a plain
// socket and checks the names and the counts. Run by `threadkit-metrics tour` (main.swift).
import ChildProcessRoles
import Prometheus
import Synchronization
import ThreadKit
import ThreadKitMetrics

enum MetricsScenario {
    static let scenario = Scenario(
        name: "metrics-prometheus", title: "latency, run time, depth and contention on a Prometheus page",
        source: "docs/Metrics.md; issue 26 item 5; SwiftNIO issues 2410 and 1859"
    ) { say in
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = TKMetricsExporter.suggestedBuckets
        let interval = 4
        try TKMetrics.setSamplingInterval(interval)
        let exporter = TKMetricsExporter.start(interval: .seconds(1), factory: factory)
        defer { exporter.stop() }
        say.say("TKMetricsExporter.start(factory: PrometheusMetricsFactory): .metrics on, 1 in \(interval) items timed")

        // The workload: 200 items of 1 ms on a serial queue, 100 blocks on a named loop, one
        // contended wait on a named lock.
        let orders = TKDispatchQueue(label: "tour.orders")
        let group = TKDispatchGroup()
        for _ in 0..<200 { orders.async(group: group) { TKThread.sleep(for: .milliseconds(1)) } }
        let uiReady = TKDispatchSemaphore(value: 0)
        let uiDone = TKDispatchSemaphore(value: 0)
        let uiLoop = LoopBox()
        let ui = TKThread(name: "tour.ui") {
            uiLoop.loop = TKRunLoop.current
            let keepAlive = TKRunLoopSource(perform: {})
            TKRunLoop.current.add(keepAlive, forMode: .default)
            _ = uiReady.signal()
            while !uiLoop.done.load(ordering: .acquiring) { _ = TKRunLoop.current.run(mode: .default, before: .now + .seconds(1)) }
            keepAlive.invalidate()
            _ = uiDone.signal()
        }
        ui.start()
        uiReady.wait()
        let performed = TKDispatchGroup()
        for _ in 0..<100 {
            performed.enter()
            uiLoop.loop?.perform { performed.leave() }
        }
        let inventory = TKLock()
        inventory.name = "tour.inventory"
        inventory.lock()
        let waiter = TKThread(name: "tour.waiter") { _ = inventory.lock(before: .now + .milliseconds(20)) }
        waiter.start()
        try say.check(waiter.join(until: .now + .seconds(30)), "the waiter never finished its timed lock")
        inventory.unlock()
        try say.check(group.wait(until: .now + .seconds(60)) == .success, "the 200 items did not finish")
        try say.check(performed.wait(until: .now + .seconds(60)) == .success, "the 100 loop blocks did not run")
        say.say(
            "workload: 200 × 1 ms on queue \"tour.orders\", 100 blocks on the loop of thread \"tour.ui\", "
                + "a 20 ms timed lock(before:) on TKLock \"tour.inventory\" while it is held")

        let endpoint = try TKMetricsHTTPEndpoint(port: 0) {
            exporter.report()
            return registry.emitToBuffer()
        }
        defer { endpoint.stop() }
        let (status, page) = try Exposition.get(port: endpoint.port, path: "/metrics")
        say.say(
            "GET http://127.0.0.1:\(endpoint.port)/metrics → \(status), \(page.utf8.count) bytes, served by TKMetricsHTTPEndpoint "
                + "(a TKSocketListener on a run-loop thread)")
        try say.check(status == 200, "the endpoint answered \(status)")
        let samples = Exposition.parse(page)
        for line in page.split(separator: "\n")
        where line.contains("tour.orders") && !line.contains("_bucket") || line.contains("le=\"0.001\"") && line.contains("tour.orders") {
            say.say("  \(line)")
        }
        let queue = ["kind": "queue", "name": "tour.orders"]
        let items = samples.value(TKMetricsExporter.Name.items, queue)
        let timed = samples.value(TKMetricsExporter.Name.runTime + "_count", queue)
        let underOneMs = samples.value(TKMetricsExporter.Name.runTime + "_bucket", queue.merging(["le": "0.001"]) { a, _ in a })
        let latencyCount = samples.value(TKMetricsExporter.Name.latency + "_count", queue)
        try say.check(items == 200, "threadkit_items_total for tour.orders is \(items.map { "\($0)" } ?? "missing"), not 200")
        try say.check(
            timed == 50 && latencyCount == 50,
            "the run-time and latency histograms hold \(timed ?? -1) and \(latencyCount ?? -1) items, not 200 / 4 = 50")
        try say.check(underOneMs == 0, "\(underOneMs ?? -1) items that slept 1 ms are in the run-time bucket under 1 ms")
        say.say("tour.orders: 200 items counted, 50 timed (1 in 4), none of them in a run-time bucket under 1 ms")

        let loop = ["kind": "loop", "name": "tour.ui"]
        let loopItems = samples.value(TKMetricsExporter.Name.items, loop)
        let loopDepth = samples.value(TKMetricsExporter.Name.depth, loop)
        try say.check(
            loopItems == 100 && loopDepth == 0, "loop tour.ui: items \(loopItems ?? -1), depth \(loopDepth ?? -1); expected 100 and 0")
        let lockWaits = samples.value(TKMetricsExporter.Name.waits, ["kind": "lock", "name": "tour.inventory"])
        try say.check(lockWaits == 1, "TKLock tour.inventory: \(lockWaits ?? -1) contended waits, expected 1")
        say.say("loop tour.ui: 100 blocks, depth 0; TKLock tour.inventory: 1 contended wait")

        var states: [String] = []
        var total = 0.0
        for state in ["running", "blocked", "stalled", "idle"] {
            let count = samples.value(TKMetricsExporter.Name.workers, ["tier": "normal", "state": state]) ?? -1
            states.append("\(state) \(Int(count))")
            total += count
        }
        let threads = samples.value(TKMetricsExporter.Name.threads, ["tier": "normal"]) ?? -1
        say.say("pool workers (normal tier): threads \(Int(threads)): \(states.joined(separator: ", "))")
        try say.check(threads >= 1 && total == threads, "the worker states add up to \(total), not the \(threads) threads")

        uiLoop.done.store(true, ordering: .releasing)
        uiLoop.loop?.wakeUp()
        _ = uiDone.wait(until: .now + .seconds(10))
        return "the Prometheus page served by a ThreadKit loop holds exact item counts, 1-in-4 timed histograms in the right "
            + "buckets, the loop's depth, the lock's wait and the pool's workers by state"
    }
}

/// The loop of the scenario's `tour.ui` thread, set by that thread before it signals ready.
final class LoopBox: @unchecked Sendable {
    // safety: `loop` is written once by the thread before the semaphore the reader waits on.
    var loop: TKRunLoop?
    let done = Atomic<Bool>(false)
}
