// Bench: `threadkit-metrics bench [ROUNDS]`, the cost of metrics on the row (issue 26:
// "Metrics on: ≤ 10% on global async"): tkbench's "async empty blocks to a global queue" (200,000
// blocks, then wait for the group), run with metrics off, on, and on with a TKMetricsExporter
// feeding a Prometheus registry, interleaved over the rounds; prints the medians per block and
// the differences. Build it in release: `swift build -c release --product threadkit-metrics`.
// Main thread only.
import ChildProcessRoles
import Prometheus
import ThreadKit
import ThreadKitMetrics

enum Bench {
    static func globalAsync(_ n: Int) -> Double {
        let group = TKDispatchGroup()
        let queue = TKDispatchQueue.global()
        let start = ContinuousClock.now
        for _ in 0..<n { queue.async(group: group) {} }
        group.wait()
        let elapsed = ContinuousClock.now - start
        let (seconds, attoseconds) = elapsed.components
        return (Double(seconds) * 1e9 + Double(attoseconds) / 1e9) / Double(n)
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    static func run(_ arguments: [String]) -> Int32 {
        let rounds = arguments.first.flatMap { Int($0) } ?? 11
        guard rounds >= 1 else {
            Console.err("threadkit-metrics bench: ROUNDS must be a positive number")
            return 2
        }
        let n = 200_000
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = TKMetricsExporter.suggestedBuckets
        let exporter = TKMetricsExporter(factory: factory, interval: .seconds(1))
        TKDiagnostics.disable(.metrics)
        _ = globalAsync(n) // warm-up: threads started, rings grown
        var off: [Double] = []
        var on: [Double] = []
        var exported: [Double] = []
        for _ in 0..<rounds {
            TKDiagnostics.disable(.metrics)
            off.append(globalAsync(n))
            TKDiagnostics.enable(.metrics)
            on.append(globalAsync(n))
            exporter.start()
            exported.append(globalAsync(n))
            exporter.stop()
        }
        TKDiagnostics.disable(.metrics)
        let (a, b, c) = (median(off), median(on), median(exported))
        func percent(_ x: Double) -> String {
            let p = (x / a - 1) * 100
            return (p >= 0 ? "+" : "") + String(Int((p * 10).rounded())).inserting(".") + " %"
        }
        Console.out("global async, 1 producer, \(n) empty blocks, median of \(rounds) interleaved rounds (ns per block):")
        Console.out("  metrics off                        \(Int(a.rounded())) ns")
        Console.out("  metrics on (1 in \(TKMetrics.samplingInterval) timed)           \(Int(b.rounded())) ns (\(percent(b)))")
        Console.out("  metrics on + exporter (Prometheus) \(Int(c.rounded())) ns (\(percent(c)))")
        Console.out("  rounds off: \(off.map { String(Int($0.rounded())) }.joined(separator: " "))")
        Console.out("  rounds on:  \(on.map { String(Int($0.rounded())) }.joined(separator: " "))")
        Console.out("  rounds exp: \(exported.map { String(Int($0.rounded())) }.joined(separator: " "))")
        return 0
    }
}

extension String {
    /// "123" → "12.3", "-5" → "-0.5": tenths written as an integer, shown with one decimal.
    fileprivate func inserting(_ point: Character) -> String {
        let negative = hasPrefix("-")
        var digits = negative ? String(dropFirst()) : self
        while digits.count < 2 { digits = "0" + digits }
        digits.insert(point, at: digits.index(before: digits.endIndex))
        return (negative ? "-" : "") + digits
    }
}
