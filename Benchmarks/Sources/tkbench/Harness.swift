// Harness: runs benchmark rows with their contenders interleaved (A B C A B C …) so that every
// contender sees the same machine conditions, and prints medians and ratios as a Markdown table.
// Single-threaded driver; contenders start their own threads where a row needs them.
import Foundation

/// One implementation measured in a row: `measure(n)` performs n operations and returns the
/// elapsed nanoseconds.
struct Contender {
    let name: String
    let measure: (Int) -> Double
}

/// A comparison: ThreadKit's contender first, then the incumbents.
struct Row {
    let group: String
    let name: String
    /// Operations per measurement, and how the per-operation time is shown (ns or µs).
    let operations: Int
    let unit: Unit
    let contenders: [Contender]
    /// The incumbent the ratio is taken against, and the target as text.
    let reference: String
    let target: String

    /// `tasksPerSecond` and `mebibytesPerSecond` (one operation = 1 MiB) show the median as a
    /// throughput and the ratio as throughput over the incumbent's (higher is better).
    enum Unit {
        case nanoseconds, microseconds, millisecondsPerSecond, tasksPerSecond, mebibytesPerSecond
        var isThroughput: Bool { self == .tasksPerSecond || self == .mebibytesPerSecond }
    }
}

@inline(never) func blackHole<T>(_ value: T) { withExtendedLifetime(value) {} }

func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func timed(_ body: () -> Void) -> Double {
    let start = now()
    body()
    return Double(now() - start)
}

struct Harness {
    let rounds: Int

    func run(_ rows: [Row]) {
        print("| row | contender | median per op | vs \("incumbent") | target |")
        print("|---|---|---|---|---|")
        // TKBENCH_ROW=text runs only the rows whose name contains it (for profiling one row).
        let onlyRow = ProcessInfo.processInfo.environment["TKBENCH_ROW"]
        for row in rows where onlyRow.map({ row.name.contains($0) }) ?? true {
            let medians = medians(row)
            let referenceIndex = row.contenders.firstIndex { $0.name == row.reference } ?? 0
            for (i, c) in row.contenders.enumerated() {
                let ratio =
                    i == referenceIndex
                    ? "1.00"
                    : row.unit.isThroughput
                        ? String(format: "%.2f× %@'s throughput", medians[referenceIndex] / medians[i], row.reference)
                        : String(format: "%.2f× %@", medians[i] / medians[referenceIndex], row.reference)
                print(
                    "| \(i == 0 ? row.name : "") | \(c.name) | \(format(medians[i], row.unit)) | \(ratio) | \(i == 0 ? row.target : "") |")
            }
            fflush(nil)
        }
    }

    /// Each contender's median time per operation over the interleaved rounds (after a warm-up).
    func medians(_ row: Row) -> [Double] {
        var samples = Array(repeating: [Double](), count: row.contenders.count)
        // TKBENCH_CONTENDER=text measures only the contenders whose name contains it (for
        // profiling one side); the others read as NaN.
        let only = ProcessInfo.processInfo.environment["TKBENCH_CONTENDER"]
        func skipped(_ c: Contender) -> Bool { only.map { !c.name.contains($0) } ?? false }
        for c in row.contenders where !skipped(c) { _ = c.measure(max(1, row.operations / 10)) } // warm-up
        for _ in 0..<rounds {
            for (i, c) in row.contenders.enumerated() {
                if skipped(c) {
                    samples[i].append(.nan)
                    continue
                }
                samples[i].append(c.measure(row.operations) / Double(row.operations))
            }
        }
        return samples.map { $0.sorted()[$0.count / 2] }
    }

    private func format(_ ns: Double, _ unit: Row.Unit) -> String {
        switch unit {
        case .nanoseconds: return String(format: "%.1f ns", ns)
        case .microseconds: return String(format: "%.1f µs", ns / 1000)
        case .millisecondsPerSecond: return String(format: "%.1f ms CPU/s", ns)
        case .tasksPerSecond: return String(format: "%.2f M tasks/s (%.0f ns per task)", 1e3 / ns, ns)
        case .mebibytesPerSecond: return String(format: "%.0f MiB/s", 1e9 / ns)
        }
    }
}
