// The flight recorder (docs/DiagnosticsTrace.md §8), in child processes started with
// TK_DIAGNOSTICS=flight…: a hang the watchdog reports writes the last seconds as Chrome JSON (parsed
// by JSONSerialization and judged by TraceJudge) and an HTML timeline (rendered by headless
// Chromium, with its task rows), both with the thread dump; events older than the window are
// gone and those from just before the hang are there; the rings' memory stays within its bound
// however much is recorded; a misuse stop writes the dump before the process stops. In process:
// the window's clipping of a capture, and a dump to a directory that does not exist.
import CThreadKit
import Foundation
import XCTest

@testable import ThreadKit

final class FlightRecorderTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tk-flight-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        TKTrace.stop()
        try? FileManager.default.removeItem(at: directory)
        super.tearDown()
    }

    func testAHangWritesTheLastSecondsAsJSONAndHTMLWithTheThreadDump() throws {
        let result = try runChild("flight-hang", diagnostics: "flight:5s,hangs:200ms")
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(result.standardError.contains("ThreadKit flight recorder: wrote "), result.standardError)
        XCTAssertTrue(result.standardError.contains("the last 5.0 s before the hang of"), result.standardError)
        let paths = try dumpedPaths(result.standardOutput)

        // The JSON: well formed, spans paired, flows complete, within the 5 s window.
        let text = try String(contentsOfFile: paths.json, encoding: .utf8)
        let events = TraceJudge.events(text)
        let document = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let other = try XCTUnwrap(document["otherData"] as? [String: Any])
        XCTAssertTrue((other["flightRecorder"] as? String ?? "").hasPrefix("the hang of"), "\(other)")
        XCTAssertEqual(other["window"] as? String, "5.0 s")
        let dump = other["threadDump"] as? String ?? ""
        XCTAssertTrue(dump.hasPrefix("ThreadKit thread dump:"), "no thread dump in the flight file: \(dump.prefix(200))")
        XCTAssertTrue(dump.hasSuffix("end of ThreadKit thread dump"), "the thread dump is cut: \(dump.suffix(200))")
        let times = events.compactMap { $0["ts"] as? Double }
        XCTAssertFalse(times.isEmpty)
        XCTAssertLessThanOrEqual(times.max() ?? 0, 5_000_000, "events span more than the 5 s window")
        let names = Set(events.compactMap { $0["name"] as? String })
        XCTAssertFalse(names.contains("old-mark"), "an event older than the window is in the dump")
        XCTAssertFalse(names.contains("old-item-mark"), "an event older than the window is in the dump")
        XCTAssertFalse(names.contains("flight.old"), "the old queue's item is in the dump")
        for name in ["recent-mark", "just-before-hang", "task-first-job", "task-second-job", "flight.hang"] {
            XCTAssertTrue(names.contains(name), "\(name) missing from the dump")
        }
        // The hung item is there, drawn to the dump's time; the task's jobs with id, priority, flows.
        XCTAssertEqual(TraceJudge.spans(events, category: "dispatch item").filter { $0["name"] as? String == "flight.hang" }.count, 1)
        let jobs = TraceJudge.spans(events, category: "task").filter { ($0["args"] as? [String: String])?["executor"] == "flight.tasks" }
        XCTAssertGreaterThanOrEqual(jobs.count, 2, "the task's jobs on flight.tasks, before and after its await")
        XCTAssertEqual(Set(jobs.compactMap { ($0["args"] as? [String: String])?["task"] }).count, 1, "one task")
        XCTAssertEqual(Set(jobs.compactMap { ($0["args"] as? [String: String])?["priority"] }), ["high"])
        XCTAssertGreaterThanOrEqual(events.filter { $0["ph"] as? String == "f" && $0["cat"] as? String == "task flow" }.count, 2)

        // The HTML: the same rows, the task rows and the thread dump, drawn by headless Chromium.
        let chromium = try Chromium.locate()
        let dom = try chromium.run(["--dump-dom", "file://" + paths.html], profile: directory.appendingPathComponent("profile").path)
        let rows = Int(attribute("data-rows", in: dom) ?? "") ?? 0
        XCTAssertGreaterThanOrEqual(rows, 3, "the main thread, the hung worker, the task's worker at least")
        XCTAssertEqual(dom.components(separatedBy: "class=\"row\"").count - 1, rows)
        XCTAssertEqual(attribute("data-task-rows", in: dom), "1", "one row for the task")
        XCTAssertEqual(dom.components(separatedBy: "class=\"task-row\"").count - 1, 1)
        XCTAssertTrue(dom.contains("id=\"thread-dump\""), "the thread dump is not on the page")
        XCTAssertTrue(dom.contains("ThreadKit thread dump:"))
    }

    func testTheRingMemoryStaysWithinItsBoundHoweverMuchIsRecorded() throws {
        let waves = 12
        let result = try runChild("flight-memory-bound", [directory.path, "\(waves)"], diagnostics: "off")
        XCTAssertEqual(result.status, 0, result.standardError)
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        let memory = lines.filter { $0.hasPrefix("memory ") }.compactMap { Int($0.split(separator: " ")[2]) }
        XCTAssertEqual(memory.count, waves)
        // The bound: 8,192 slots of 32 bytes, plus per ring (at most 8 threads alive at once, the
        // main thread's, and up to 65 retired rings kept) a 64-slot minimum and its header.
        let perRing = 64 * 32 + MemoryLayout<tk_trace_ring>.stride + 64 * MemoryLayout<String?>.stride
        let bound = 8_192 * 32 + (8 + 1 + 65) * perRing
        for (wave, bytes) in memory.enumerated() {
            XCTAssertLessThanOrEqual(bytes, bound, "wave \(wave): the rings hold \(bytes) bytes, over the bound \(bound)")
        }
        // What was recorded would need 100 times the bound: far more than the window holds.
        XCTAssertGreaterThan(waves * 8 * 20_000 * 32, 100 * bound)
        // Recorded: 12 × 8 × 20,000 events, 61 MB if kept. The process grew by far less.
        let growth = lines.first { $0.hasPrefix("rss-growth ") }.flatMap { Int($0.split(separator: " ")[1]) } ?? .max
        XCTAssertLessThan(growth, 16 * 1024, "peak RSS grew by \(growth) KiB")
        // The dump holds the last wave, not the first (older than the 200 ms window).
        let paths = try dumpedPaths(result.standardOutput)
        let names = Set(TraceJudge.events(try String(contentsOfFile: paths.json, encoding: .utf8)).compactMap { $0["name"] as? String })
        XCTAssertTrue(names.contains("wave \(waves - 1)"), "the last wave is missing")
        XCTAssertFalse(names.contains("wave 0"), "the first wave is older than the window")
    }

    func testAMisuseStopWritesTheFlightDumpBeforeTheProcessStops() throws {
        let result = try runChild("flight-misuse", diagnostics: "flight:5s")
        XCTAssertTrue(result.signalled, "the misuse did not stop the process: status \(result.status)")
        XCTAssertTrue(result.standardError.contains("ThreadKit misuse: TKDiagnostics.hangThreshold set to"), result.standardError)
        XCTAssertTrue(result.standardError.contains("ThreadKit flight recorder: wrote "), result.standardError)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("threadkit-flight-") }
        XCTAssertEqual(files.filter { $0.hasSuffix(".json") }.count, 1, "\(files)")
        XCTAssertEqual(files.filter { $0.hasSuffix(".html") }.count, 1, "\(files)")
        let json = try String(contentsOf: directory.appendingPathComponent(files.first { $0.hasSuffix(".json") }!), encoding: .utf8)
        let events = TraceJudge.events(json)
        XCTAssertTrue(events.contains { $0["name"] as? String == "before-misuse" })
        let document = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let reason = (document["otherData"] as? [String: Any])?["flightRecorder"] as? String ?? ""
        XCTAssertTrue(reason.hasPrefix("misuse: TKDiagnostics.hangThreshold set to"), reason)
        let html = try String(contentsOf: directory.appendingPathComponent(files.first { $0.hasSuffix(".html") }!), encoding: .utf8)
        XCTAssertTrue(html.hasSuffix("</html>"), "the HTML file is cut")
    }

    func testTheWindowDropsOlderEventsAndKeepsSpansOpenAtItsStart() {
        func event(_ time: UInt64, _ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, object: UInt64 = 0) -> tk_trace_event {
            tk_trace_event(timestamp: time, object: object, argument: 0, name: 0, kind: kind.rawValue, phase: phase.rawValue, detail: 0)
        }
        let events = [
            event(100, .thread, .begin, object: 7), // open across the cutoff: kept, moved to it
            event(110, .mark, .instant), // older: gone
            event(120, .dispatchItem, .begin, object: 1), // closed before the cutoff: gone
            event(130, .dispatchItem, .end, object: 1),
            event(140, .lockWait, .begin, object: 2), // open across the cutoff
            event(210, .lockWait, .end, object: 2),
            event(220, .mark, .instant),
            event(230, .operation, .begin, object: 3), // still open at the dump
        ]
        let capture = TraceCapture(
            events: events, segments: [TraceCapture.Segment(start: 0, count: events.count, tid: 42, osName: "t", written: 20)],
            names: [""])
        let clipped = capture.clipped(from: 200, openUntil: 300)
        let thread = clipped.thread(0)
        XCTAssertEqual(thread.events.map(\.timestamp), [200, 200, 210, 220, 230])
        XCTAssertEqual(thread.events.map(\.kind), [.thread, .lockWait, .lockWait, .mark, .operation])
        XCTAssertEqual(thread.overwritten, 0, "the ring's oldest event is older than the window: nothing of it was lost")
        let row = TraceRows(clipped).row(0)
        let operation = row.spans.first { $0.kind == .operation }
        XCTAssertEqual(operation?.end, 300, "a span open at the dump runs to the dump's time")
        XCTAssertEqual(row.spans.first { $0.kind == .thread }?.start, 200)
        XCTAssertEqual(row.spans.first { $0.kind == .lockWait }.map { [$0.start, $0.end] }, [200, 210])
        XCTAssertEqual(clipped.summary().end, 300)
    }

    /// The sampling decision with the clock passed in: items 100 ns apart push the period up at
    /// most fourfold a step to what spaces traced items 16 µs apart (160), never past 1,024;
    /// a thread going quiet is back to tracing every item at its next traced one.
    func testTheSamplingPeriodSpacesTracedItemsSixteenMicrosecondsApart() {
        var sampler = tk_trace_sampler(countdown: 0, period: 0, last: 0)
        tk_trace_sample_adapt_at(&sampler, 1_000)
        XCTAssertEqual([sampler.period, sampler.countdown], [1, 1], "a thread's first item is traced, and the next")
        var now: UInt64 = 1_000
        var periods: [UInt32] = []
        for _ in 0..<8 {
            now += UInt64(sampler.period) * 100 // `period` items, 100 ns apart, since the last traced one
            tk_trace_sample_adapt_at(&sampler, now)
            periods.append(sampler.period)
        }
        XCTAssertEqual(periods, [4, 16, 64, 160, 160, 160, 160, 160])
        XCTAssertEqual(sampler.countdown, 160)
        // Quiet: the next 160 items come 1 ms apart.
        now += 160 * 1_000_000
        tk_trace_sample_adapt_at(&sampler, now)
        XCTAssertEqual(sampler.period, 1)
        // A flood of items 1 ns apart: capped.
        for _ in 0..<10 {
            now += UInt64(sampler.period)
            tk_trace_sample_adapt_at(&sampler, now)
        }
        XCTAssertEqual(sampler.period, 1_024)
    }

    /// In flight mode a thread that submits items sparsely has every one traced, one flooding a
    /// queue has a sample traced, each traced item whole (TraceJudge: every flow started is
    /// finished, every span closed); a plain trace session traces every item of the flood.
    func testFlightModeTracesASparseSubmittersEveryItemAndSamplesAFloodInWholeItems() throws {
        let flood = 20_000
        let done = DispatchGroup() // the judge of completion: Foundation's
        func run(sparseLabel: String, floodLabel: String) {
            tk_trace_sample_reset()
            let sparse = TKDispatchQueue(label: sparseLabel)
            for _ in 0..<20 {
                TKThread.sleep(for: .milliseconds(1)) // the submitter's rate: one item per millisecond
                done.enter()
                sparse.async { done.leave() }
                XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
            }
            let queue = TKDispatchQueue(label: floodLabel)
            for _ in 0..<flood {
                done.enter()
                queue.async { done.leave() }
            }
            XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        }
        func items(_ events: [[String: Any]], _ label: String) -> Int {
            TraceJudge.spans(events, category: "dispatch item").filter { $0["name"] as? String == label }.count
        }

        TKTrace.startFlightRecorder(window: .seconds(30), capacity: 1 << 16, totalCapacity: 1 << 19)
        run(sparseLabel: "flight.sparse", floodLabel: "flight.flood")
        let sampled = TraceJudge.events(TKTrace.chromeJSON())
        XCTAssertEqual(items(sampled, "flight.sparse"), 20, "every item of a sparse submitter")
        let traced = items(sampled, "flight.flood")
        XCTAssertGreaterThan(traced, 0)
        XCTAssertLessThan(traced, flood / 2, "a flood is sampled")

        TKTrace.start(capacity: 1 << 16, totalCapacity: 1 << 19)
        run(sparseLabel: "trace.sparse", floodLabel: "trace.flood")
        let all = TraceJudge.events(TKTrace.chromeJSON())
        XCTAssertEqual(items(all, "trace.sparse"), 20)
        XCTAssertEqual(items(all, "trace.flood"), flood, "a plain session traces every item")
        TKTrace.stop()
    }

    func testDumpingToADirectoryThatDoesNotExistThrowsNamingIt() {
        TKTrace.startFlightRecorder(window: .seconds(1))
        XCTAssertTrue(TKTrace.isFlightRecording)
        TKTrace.mark("something")
        let missing = directory.appendingPathComponent("no/such/dir").path
        XCTAssertThrowsError(try TKTrace.dumpFlight(to: missing)) { error in
            let error = error as? TKError
            XCTAssertEqual(error?.code, .systemCall)
            XCTAssertEqual(error?.errno, ENOENT)
            XCTAssertTrue(error?.message.contains(missing) ?? false, "\(String(describing: error))")
        }
        TKTrace.stop()
        XCTAssertFalse(TKTrace.isFlightRecording)
    }

    // MARK: Helpers

    /// Runs `ThreadKitTestChild role` with TK_DIAGNOSTICS=`diagnostics` and TK_FLIGHT_DIR set to
    /// this test's directory; at most 120 s.
    private func runChild(_ role: String, _ arguments: [String] = [], diagnostics: String) throws -> ChildResult {
        try ChildProcess.run(
            role, arguments, environment: ["TK_DIAGNOSTICS": diagnostics, "TK_FLIGHT_DIR": directory.path],
            timeout: .seconds(120))
    }

    /// The paths of the child's "dumped JSON HTML" line.
    private func dumpedPaths(_ output: String) throws -> (json: String, html: String) {
        let line = try XCTUnwrap(output.split(separator: "\n").first { $0.hasPrefix("dumped ") }, output)
        let parts = line.split(separator: " ").map(String.init)
        XCTAssertEqual(parts.count, 3)
        XCTAssertTrue(parts[1].hasPrefix(directory.path + "/threadkit-flight-"), parts[1])
        return (parts[1], parts[2])
    }

    private func attribute(_ name: String, in dom: String) -> String? {
        guard let start = dom.range(of: "\(name)=\"") else { return nil }
        return String(dom[start.upperBound...].prefix { $0 != "\"" })
    }
}
