// SeriesLimitTests: TKMetricsExporter's cap on per-name series (issue 49, finding 4;
// docs/Metrics.md §3, "How many names"). In a child process (its standard error captured):
// 1,500 queue names, then 750 more, with a limit of 100. Judged by the Prometheus page the child
// prints, read with the tests' own parser: 100 names of their own, the rest added up under
// name="other" (counters and histograms alike), at most 101 series per metric, one line on
// standard error. A negative limit is a misuse that stops the process.
import ChildProcessRoles
import ThreadKitMetrics
import XCTest

final class SeriesLimitTests: XCTestCase {
    func testNamesPastTheLimitAreAddedUpUnderOtherAndSaidOnce() throws {
        let result = try MetricsChild("series", ["1500", "100"]).finish(before: .now + .seconds(300))
        XCTAssertEqual(result.status, 0, result.error)
        let samples = Exposition.parse(result.output).filter { $0.labels["kind"] == "queue" }
        func series(_ metric: String) -> [ExpositionSample] { samples.filter { $0.name == metric } }
        let names = 1_500 + 750
        for metric in [TKMetricsExporter.Name.items, TKMetricsExporter.Name.latency + "_count", TKMetricsExporter.Name.runTime + "_count"] {
            let all = series(metric)
            let own = all.filter { $0.labels["name"] != "other" }
            XCTAssertEqual(own.count, 100, metric)
            XCTAssertTrue(own.allSatisfy { $0.labels["name"]!.hasPrefix("series-") && $0.value == 2 }, metric)
            // Two items per name, every item timed (interval 1): the rest are all under `other`.
            XCTAssertEqual(all.first { $0.labels["name"] == "other" }?.value, Double(2 * (names - 100)), metric)
        }
        for metric in [TKMetricsExporter.Name.depth, TKMetricsExporter.Name.waits, TKMetricsExporter.Name.waitSeconds] {
            XCTAssertEqual(series(metric).count, 101, metric)
        }
        XCTAssertEqual(series(TKMetricsExporter.Name.latency + "_bucket").count, 101 * (PrometheusBuckets.count + 1))
        let lines = result.error.split(separator: "\n").filter { $0.contains("ThreadKitMetrics") }
        XCTAssertEqual(lines.count, 1, result.error)
        XCTAssertTrue(lines.first?.contains("more than 100 queue, loop and lock names") == true, result.error)
        XCTAssertTrue(lines.first?.contains("name=\"other\"") == true, result.error)
    }

    func testANegativeSeriesLimitIsAMisuse() throws {
        let result = try MetricsChild("series-limit-negative", []).finish(before: .now + .seconds(60))
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.error.contains("ThreadKit misuse: TKMetricsExporter(seriesLimit: -1)"), result.error)
        XCTAssertTrue(result.error.contains("Fix:"), result.error)
    }
}

/// swift-prometheus's default duration buckets, which the child's factory keeps (11 of them).
private enum PrometheusBuckets {
    static let count = 11
}
