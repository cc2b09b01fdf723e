// NamesBench: `threadkit-metrics names COUNT`, the cost of many distinct names (issue 49, finding 4):
// COUNT serial queues, each with its own label and one item, exported by a TKMetricsExporter (its
// default series limit) to a Prometheus registry with the suggested buckets. Prints the time to
// create their series (the items, whose first timed item makes each source's Timers, then the first
// report, which makes the counters and gauges), the median of three scrapes (a report and
// `emitToBuffer()`), the page's size and the peak RSS. Build it in release. Main thread only.
import ChildProcessRoles
import Glibc
import Prometheus
import ThreadKit
import ThreadKitMetrics

enum NamesBench {
    static func milliseconds(_ d: Duration) -> String {
        let (seconds, attoseconds) = d.components
        let ms = Double(seconds) * 1e3 + Double(attoseconds) / 1e15
        let tenths = Int((ms * 10).rounded())
        return ms < 10 ? "\(tenths / 10).\(tenths % 10) ms" : "\(Int(ms.rounded())) ms"
    }

    /// The peak resident memory (VmHWM of /proc/self/status), in MB.
    static func peakRSS() -> String {
        let fd = open("/proc/self/status", O_RDONLY)
        guard fd >= 0 else { return "?" }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let n = read(fd, &bytes, bytes.count)
        guard n > 0 else { return "?" }
        let line = String(decoding: bytes[0..<n], as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        guard let kB = line?.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return "?" }
        return "\(kB / 1024) MB"
    }

    static func run(_ arguments: [String]) -> Int32 {
        guard let count = arguments.first.flatMap({ Int($0) }), count >= 1 else {
            Console.err("threadkit-metrics names: COUNT must be a positive number")
            return 2
        }
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = TKMetricsExporter.suggestedBuckets
        let exporter = TKMetricsExporter.start(interval: .seconds(3600), factory: factory)
        defer { exporter.stop() }
        var queues: [TKDispatchQueue] = []
        queues.reserveCapacity(count)
        let group = TKDispatchGroup()
        let clock = ContinuousClock()
        let start = clock.now
        for i in 0..<count {
            let queue = TKDispatchQueue(label: "bench.name.\(i)")
            queues.append(queue)
            queue.async(group: group) {}
        }
        group.wait()
        let itemsDone = clock.now
        exporter.report()
        let created = clock.now
        var scrapes: [Duration] = []
        var pageBytes = 0
        for _ in 0..<3 {
            let before = clock.now
            exporter.report()
            pageBytes = registry.emitToBuffer().count
            scrapes.append(clock.now - before)
        }
        let scrape = scrapes.sorted()[1]
        Console.out(
            "names \(count): create \(milliseconds(created - start)) (items \(milliseconds(itemsDone - start)), first report "
                + "\(milliseconds(created - itemsDone))), scrape \(milliseconds(scrape)) (median of 3), page \(pageBytes) bytes, "
                + "peak RSS \(peakRSS())")
        return 0
    }
}
