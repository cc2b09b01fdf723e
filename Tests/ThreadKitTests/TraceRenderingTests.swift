// The HTML timeline rendered by a real browser: headless Chromium (Debian's `chromium`; .ci/run
// installs it) loads the exported page from disk with no network, runs its script, and the test
// reads back the DOM it produced (one `g.row` per recorded thread, labelled with the thread's
// name, laid out as separate bands from top to bottom) and a screenshot, decoded (PNGImage),
// whose pixels show one alternating background band per thread. Without Chromium the test fails under CI (TK_REQUIRE_CHROMIUM=1 or CI set)
// and is skipped elsewhere, saying how to install it.
import Foundation
import XCTest

@testable import ThreadKit

final class TraceRenderingTests: XCTestCase {
    override func tearDown() {
        TKTrace.stop()
        super.tearDown()
    }

    func testTheHTMLTimelineRendersOneRowPerThreadInHeadlessChromium() throws {
        let chromium = try Chromium.locate()
        TKTrace.start(capacity: 8192)
        try TracedWork.run()
        TKTrace.stop()
        let recorded = TKTrace.threads
        XCTAssertGreaterThanOrEqual(recorded.count, 3, "the loop thread, the lock waiter and the main thread at least")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tk-trace-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let page = directory.appendingPathComponent("trace.html").path
        try TKTrace.writeHTML(to: page, title: "rendering test")
        // The page is judged against the rows it carries: a thread that was recording as stop()
        // was called (a pool worker ending its item) may add its last event, and its row, after
        // the snapshot above (CI saw 5 rows exported against 4 read before).
        let threads = try TracePage.rows(ofPageAt: page)
        for thread in recorded {
            XCTAssertTrue(threads.contains { $0.tid == thread.threadID }, "the page lost thread \(thread.threadID) \(thread.name)")
        }

        let dom = try chromium.run(["--dump-dom", "file://" + page], profile: directory.appendingPathComponent("profile").path)
        XCTAssertTrue(dom.contains("<title>ThreadKit trace: \(threads.count) rows</title>"), "title not set by the page's script")
        XCTAssertEqual(attribute("data-rows", in: dom), "\(threads.count)")
        XCTAssertEqual(dom.components(separatedBy: "class=\"row\"").count - 1, threads.count, "one drawn row per thread")
        for thread in threads {
            XCTAssertTrue(dom.contains("data-tid=\"\(thread.tid)\""), "no row for thread \(thread.tid) \(thread.name)")
        }
        XCTAssertTrue(dom.contains("data-thread=\"trace-loop\""))
        let tops = (attribute("data-row-tops", in: dom) ?? "").split(separator: ",").compactMap { Int($0) }
        XCTAssertEqual(tops.count, threads.count)
        XCTAssertEqual(tops, tops.sorted(), "rows laid out top to bottom")
        XCTAssertEqual(Set(tops).count, tops.count, "each row a band of its own")

        // The screenshot, tall enough for every row: its pixels must show one band per thread.
        let shot = directory.appendingPathComponent("trace.png").path
        let height = max(600, (tops.last ?? 0) + 400)
        _ = try chromium.run(
            ["--screenshot=" + shot, "--window-size=1400,\(height)", "file://" + page],
            profile: directory.appendingPathComponent("profile").path)
        let image = try PNGImage(Data(contentsOf: URL(fileURLWithPath: shot)))
        XCTAssertEqual(image.width, 1400)
        XCTAssertEqual(image.height, height)
        XCTAssertEqual(rowBands(image, from: tops.first ?? 0), threads.count, "the screenshot shows a band per thread")
    }

    /// Counts the row bands in the screenshot: down the column just left of the plot (x = 188,
    /// background only), rows alternate white and #f3f5f7 from the first row's top until the
    /// page's #fafafa. Runs under 4 pixels (anti-aliased edges) are ignored.
    private func rowBands(_ image: PNGImage, from top: Int) -> Int {
        enum Shade { case white, stripe, other }
        func shade(_ y: Int) -> Shade {
            switch image.rgb(188, y) {
            case (255, 255, 255): .white
            case (243, 245, 247): .stripe
            default: .other
            }
        }
        var runs: [(Shade, Int)] = []
        for y in max(0, top - 2)..<image.height {
            let s = shade(y)
            if let last = runs.last, last.0 == s { runs[runs.count - 1].1 += 1 } else { runs.append((s, 1)) }
        }
        var bands: [Shade] = []
        for (s, length) in runs where length >= 4 {
            if s == .other { if !bands.isEmpty { break } else { continue } }
            if bands.last != s { bands.append(s) }
        }
        return bands.count
    }

    private func attribute(_ name: String, in dom: String) -> String? {
        guard let start = dom.range(of: "\(name)=\"") else { return nil }
        return String(dom[start.upperBound...].prefix { $0 != "\"" })
    }
}

/// The data an exported HTML timeline carries: the JSON between `const TRACE = ` and the `;`
/// that ends that statement, read back with JSONSerialization.
enum TracePage {
    struct Row: Equatable {
        let tid: UInt32
        let name: String
    }

    static func rows(ofPageAt path: String) throws -> [Row] {
        let page = try String(contentsOfFile: path, encoding: .utf8)
        guard let start = page.range(of: "const TRACE = "),
            let next = page.range(of: "const COLORS = ", range: start.upperBound..<page.endIndex),
            let end = page[start.upperBound..<next.lowerBound].lastIndex(of: ";")
        else {
            XCTFail("no trace data in the page at \(path)")
            return []
        }
        let data = Data(page[start.upperBound..<end].utf8)
        let rows = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["rows"] as? [[String: Any]] ?? []
        return rows.compactMap { row in
            guard let tid = (row["tid"] as? NSNumber)?.uint32Value else { return nil }
            return Row(tid: tid, name: row["name"] as? String ?? "")
        }
    }
}

/// The headless browser the rendering test drives.
struct Chromium {
    let path: String

    static func locate() throws -> Chromium {
        let environment = ProcessInfo.processInfo.environment
        let candidates =
            [environment["TK_CHROMIUM"]].compactMap { $0 }
            + ["chromium", "chromium-browser", "google-chrome"].flatMap { name in
                (environment["PATH"] ?? "/usr/bin").split(separator: ":").map { "\($0)/\(name)" }
            }
        if let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) {
            return Chromium(path: found)
        }
        let message =
            "headless Chromium is needed to render the trace's HTML timeline and was not found "
            + "(looked for TK_CHROMIUM, chromium, chromium-browser, google-chrome on PATH). "
            + "Install it: sudo apt-get update && sudo apt-get install -y chromium"
        if environment["TK_REQUIRE_CHROMIUM"] == "1" || environment["CI"] != nil {
            XCTFail(message)
            throw XCTSkip("failed above: " + message)
        }
        throw XCTSkip(message)
    }

    /// Runs Chromium headless on `arguments`; returns its standard output. A fresh profile per
    /// run, no sandbox (CI runs as root), no GPU; fails after 120 s.
    func run(_ arguments: [String], profile: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments =
            [
                "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--user-data-dir=" + profile,
            ] + arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let finished = DispatchSemaphore(value: 0)
        let collected = Guarded<Data>(Data())
        Thread {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            collected.withLock { $0 = data }
            finished.signal()
        }.start()
        let drainErrors = Thread { _ = errors.fileHandleForReading.readDataToEndOfFile() }
        drainErrors.start()
        if finished.wait(timeout: .now() + 120) == .timedOut {
            process.terminate()
            XCTFail("chromium did not finish within 120 s")
        }
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "chromium \(arguments) exited with \(process.terminationStatus)")
        return String(decoding: collected.withLock { $0 }, as: UTF8.self)
    }
}
