// An export's memory and size (docs/DiagnosticsTrace.md §1 budget, §3 streaming), in child
// processes (`ThreadKitTestChild trace-export-bounded`): 1,000 threads, all alive at once, each mark
// 1,000 events into per-thread rings of 4,096 slots that share a budget of 65,536. The export
// streams to a file: the child's peak RSS (getrusage, before and after the export) must grow by
// at most the documented bound more than a control run that records the same and exports
// nothing; the file must stay within what the budget allows, parse with JSONSerialization, pass
// TraceJudge, and hold the last event of every thread — the last started included.
import Foundation
import XCTest

final class TraceExportBoundsTests: XCTestCase {
    private static let threads = 1_000, events = 1_000, capacity = 4_096, total = 65_536

    /// Runs the role; returns the peak-RSS growth across the export (KiB).
    private func run(_ mode: String, _ path: String) throws -> Int {
        let result = try ChildProcess.run(
            "trace-export-bounded",
            [mode, path, "\(Self.threads)", "\(Self.events)", "\(Self.capacity)", "\(Self.total)"],
            timeout: .seconds(240))
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        func value(_ key: String) -> Int? {
            result.standardOutput.split(separator: "\n").first { $0.hasPrefix(key + " ") }.flatMap { Int($0.dropFirst(key.count + 1)) }
        }
        guard let before = value("rss-before"), let after = value("rss-after") else {
            XCTFail("no RSS lines: \(result.standardOutput) \(result.standardError)")
            return .max
        }
        return after - before
    }

    func testExportingAThousandThreadsStreamsInBoundedMemoryAndKeepsTheLastThreads() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tk-trace-bounds-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("threads.json").path

        let control = try run("control", directory.appendingPathComponent("unused.json").path)
        let growth = try run("export", path)
        // docs/DiagnosticsTrace.md §3: an export holds the capture (32 bytes a slot of the
        // session's rings: here at most 65,536 + 1,000 × 64 slots, 4 MiB), one thread's row and a
        // 64 KiB buffer; 32 MiB leaves room for the allocator. Before the streaming export and
        // the budget, this run grew by hundreds of MiB (every thread's events at once, three times
        // over: events, timeline, one String).
        XCTAssertLessThanOrEqual(growth - control, 32 * 1024, "peak RSS grew by \(growth) KiB (control \(control) KiB)")

        // The rings hold at most the budget plus the 64-slot minimum of each later thread; an
        // instant mark is about 110 bytes of JSON, a thread's metadata about 200.
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? .max
        let slots = Self.total + Self.threads * 64
        XCTAssertLessThanOrEqual(size, slots * 200 + Self.threads * 400, "the file is \(size) bytes")

        let events = TraceJudge.events(try String(contentsOfFile: path, encoding: .utf8))
        let names = Set(events.compactMap { $0["name"] as? String })
        let missing = (0..<Self.threads).filter { !names.contains("last \($0)") }
        XCTAssertEqual(missing, [], "threads whose last event is missing")
        let rows = Set(events.filter { $0["name"] as? String == "thread_name" }.compactMap { $0["tid"] as? Int })
        XCTAssertGreaterThanOrEqual(rows.count, Self.threads)
    }
}
