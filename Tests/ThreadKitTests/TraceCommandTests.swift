// `threadkit trace` and TK_DIAGNOSTICS=trace, in child processes (the CLI and ThreadKitTestChild,
// built beside the test bundle): the files they write are judged like TKTrace's own (TraceJudge),
// by JSONSerialization.
import Foundation
import XCTest

final class TraceCommandTests: XCTestCase {
    private func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tk-trace-cli-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    func testTraceCommandRecordsATourScenarioAsJSONAndHTML() throws {
        let directory = try temporaryDirectory()
        let json = directory.appendingPathComponent("graph.json").path
        let html = directory.appendingPathComponent("graph.html").path
        let result = try ChildProcess.runCommand(["trace", "operation-graph", "-o", json, "--html", html], timeout: .seconds(120))
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("trace: "), result.standardOutput)
        let events = TraceJudge.events(try String(contentsOfFile: json, encoding: .utf8))
        let operations = Set(TraceJudge.spans(events, category: "operation").compactMap { $0["name"] as? String })
        XCTAssertTrue(operations.isSuperset(of: ["download a.jpg", "decode a.jpg", "thumbnail a.jpg", "share album"]), "\(operations)")
        XCTAssertFalse(operations.contains("decode b.jpg"), "the cancelled step never executes")
        XCTAssertTrue(events.contains { $0["name"] as? String == "cancelled decode b.jpg" })
        let page = try String(contentsOfFile: html, encoding: .utf8)
        XCTAssertTrue(page.hasPrefix("<!DOCTYPE html>"))
        // Nothing loaded from elsewhere: the only URL is the SVG namespace, which is a name.
        let rest = page.replacingOccurrences(of: "\"http://www.w3.org/2000/svg\"", with: "")
        for loader in ["http://", "https://", "src=", "href=", "<link", "fetch(", "XMLHttpRequest", "import("] {
            XCTAssertFalse(rest.contains(loader), "the page must be self-contained: it contains \(loader)")
        }
    }

    func testTraceCommandRefusesUnknownScenariosAndMissingOutput() throws {
        let unknown = try ChildProcess.runCommand(["trace", "no-such-scenario", "-o", "/dev/null"])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.standardError.contains("no scenario named no-such-scenario"), unknown.standardError)
        let noOutput = try ChildProcess.runCommand(["trace", "operation-graph"])
        XCTAssertEqual(noOutput.status, 2)
        XCTAssertTrue(noOutput.standardError.contains("usage: threadkit trace SCENARIO -o FILE.json"), noOutput.standardError)
    }

    func testTKDiagnosticsTraceRecordsFromLaunch() throws {
        let directory = try temporaryDirectory()
        let json = directory.appendingPathComponent("launch.json").path
        for setting in ["trace", "off"] {
            let process = Process()
            process.executableURL = ChildProcess.executable
            process.arguments = ["trace-from-launch", json]
            var environment = ProcessInfo.processInfo.environment
            environment["TK_DIAGNOSTICS"] = setting
            environment["SWIFT_BACKTRACE"] = "enable=no"
            process.environment = environment
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0, output)
            XCTAssertTrue(output.hasPrefix("recording: \(setting == "trace")"), output)
            let events = TraceJudge.events(try String(contentsOfFile: json, encoding: .utf8))
            let items = TraceJudge.spans(events, category: "dispatch item").filter { $0["name"] as? String == "launch.q" }
            let threads = TraceJudge.spans(events, category: "thread").compactMap { $0["name"] as? String }
            if setting == "trace" {
                XCTAssertEqual(items.count, 5)
                XCTAssertTrue(threads.contains("launch-thread"), "\(threads)")
            } else {
                XCTAssertEqual(items.count, 0)
                XCTAssertTrue(output.contains("events 0"), output)
            }
        }
    }
}
