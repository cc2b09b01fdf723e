// TourTests: `threadkit-metrics tour` (built beside this test bundle) runs the metrics-prometheus
// scenario end to end — workload, exporter, Prometheus page served by a ThreadKit loop, read back —
// and passes; `--list` names it. Foundation's Process is the independent judge here.
import Foundation
import XCTest

final class TourTests: XCTestCase {
    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let tool = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("threadkit-metrics")
        let process = Process()
        process.executableURL = tool
        process.arguments = arguments
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("threadkit-metrics-tour-\(getpid()).txt")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        defer { try? FileManager.default.removeItem(at: output) }
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let deadline = ContinuousClock.now + .seconds(120)
        while process.isRunning && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning {
            process.terminate()
            XCTFail("threadkit-metrics \(arguments.joined(separator: " ")) did not finish in 120 s")
        }
        process.waitUntilExit()
        try handle.close()
        return (process.terminationStatus, try String(contentsOf: output, encoding: .utf8))
    }

    func testTheMetricsTourPasses() throws {
        let (status, output) = try run(["tour"])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("✔ verdict: PASS"), output)
        XCTAssertTrue(output.contains("threadkit_items_total{kind=\"queue\",name=\"tour.orders\"} 200"), output)
        XCTAssertTrue(output.contains("tour: 1 of 1 scenarios passed"), output)
    }

    func testTheTourListsItsScenario() throws {
        let (status, output) = try run(["tour", "--list"])
        XCTAssertEqual(status, 0)
        XCTAssertTrue(output.hasPrefix("metrics-prometheus "), output)
        XCTAssertEqual(try run(["tour", "nonsense"]).status, 2)
    }
}
