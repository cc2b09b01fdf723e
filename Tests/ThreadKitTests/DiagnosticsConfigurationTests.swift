// TK_DIAGNOSTICS parsing (docs/Diagnostics.md §0): the parser is a pure function, tested against a
// table — spaces around items, any case, options that are wrong — and once in a child process,
// whose stderr must name each rejected item, once, with the accepted forms, and whose switch must
// show that a rejected item enabled nothing of itself (`lockorder:f` is not fatal mode).
import Foundation
import XCTest

@testable import ThreadKit

/// The real-time signals' range, as glibc gives it (SIGRTMIN is a function call in C).
private let rtMin = __libc_current_sigrtmin()
private let rtMax = __libc_current_sigrtmax()

final class DiagnosticsConfigurationTests: XCTestCase {
    private struct Case {
        let text: String
        let features: TKDiagnosticsFeature
        var off = false
        var threshold: Duration = DiagnosticsConfiguration.defaultHangThreshold
        var rejected: [String] = []
        var dumpSignal: Int32? = nil
        var flightWindow: Duration? = nil
    }

    private static let all: TKDiagnosticsFeature = [.lockOrder, .hangs, .contention, .trace]

    private static let table: [Case] = [
        Case(text: "lockorder", features: .lockOrder),
        Case(text: "lockorder, hangs", features: [.lockOrder, .hangs]),
        Case(text: " hangs", features: .hangs),
        Case(text: "LOCKORDER", features: .lockOrder),
        Case(text: "Hangs:100ms", features: .hangs, threshold: .milliseconds(100)),
        Case(text: "hangs : 100 MS", features: .hangs, threshold: .milliseconds(100)),
        Case(text: "\tcontention\n", features: .contention),
        Case(text: ",, ,trace,", features: .trace),
        Case(text: "lockorder:fatal", features: [.lockOrder, .lockOrderFatal]),
        Case(text: "LockOrder: FATAL ", features: [.lockOrder, .lockOrderFatal]),
        Case(text: "lockorder:f", features: [], rejected: ["lockorder:f"]),
        Case(text: "lockorder:", features: [], rejected: ["lockorder:"]),
        Case(text: "hangs:abc", features: [], rejected: ["hangs:abc"]),
        Case(text: "hangs:0", features: [], rejected: ["hangs:0"]),
        Case(text: "hangs:-5ms", features: [], rejected: ["hangs:-5ms"]),
        Case(text: "hangs:10 parsecs", features: [], rejected: ["hangs:10 parsecs"]),
        Case(text: "hangs:1.5s", features: .hangs, threshold: .milliseconds(1500)),
        Case(text: "hangs:500us", features: .hangs, threshold: .microseconds(500)),
        Case(text: "hangs:500µs", features: .hangs, threshold: .microseconds(500)),
        Case(text: "hangs:750", features: .hangs, threshold: .milliseconds(750)),
        Case(text: "hangs:2s,hangs:100ms", features: .hangs, threshold: .milliseconds(100)),
        Case(text: "hangs:100ms, hangs:soon", features: .hangs, threshold: .milliseconds(100), rejected: ["hangs:soon"]),
        Case(text: "contention:yes", features: [], rejected: ["contention:yes"]),
        Case(text: "trace:4096, contention", features: .contention, rejected: ["trace:4096"]),
        Case(text: "All", features: all),
        Case(text: "off", features: [], off: true),
        Case(text: "NONE, trace", features: .trace, off: true),
        Case(text: "frobnicate, trace", features: .trace, rejected: ["frobnicate"]),
        Case(text: "lock order", features: [], rejected: ["lock order"]),
        Case(text: "", features: []),
        Case(text: "blocking", features: .blocking),
        Case(text: "Blocking : Fatal", features: [.blocking, .blockingFatal]),
        Case(text: "blocking:yes", features: [], rejected: ["blocking:yes"]),
        Case(text: "waits, metrics", features: [.waits, .metrics]),
        Case(text: "waits:1", features: [], rejected: ["waits:1"]),
        Case(text: "dump", features: [.dumpOnSignal, .waits], dumpSignal: SIGUSR2),
        Case(text: "dump:SIGUSR1", features: [.dumpOnSignal, .waits], dumpSignal: SIGUSR1),
        Case(text: "dump: quit", features: [.dumpOnSignal, .waits], dumpSignal: SIGQUIT),
        Case(text: "dump:12", features: [.dumpOnSignal, .waits], dumpSignal: 12),
        Case(text: "dump:SIGKILL", features: [], rejected: ["dump:SIGKILL"]),
        Case(text: "dump:SIGSEGV, trace", features: .trace, rejected: ["dump:SIGSEGV"]),
        Case(text: "dump:999", features: [], rejected: ["dump:999"]),
        // Issue 49: a shutdown signal taken for dumps would no longer stop the process.
        Case(text: "dump:SIGTERM", features: [], rejected: ["dump:SIGTERM"]),
        Case(text: "dump:SIGINT, trace", features: .trace, rejected: ["dump:SIGINT"]),
        Case(text: "dump:hup", features: [], rejected: ["dump:hup"]),
        Case(text: "dump:15", features: [], rejected: ["dump:15"]),
        Case(text: "dump:2", features: [], rejected: ["dump:2"]),
        Case(text: "dump:SIGSTOP", features: [], rejected: ["dump:SIGSTOP"]),
        Case(text: "dump:SIGCHLD", features: [], rejected: ["dump:SIGCHLD"]),
        Case(text: "dump:\(SIGCHLD)", features: [], rejected: ["dump:\(SIGCHLD)"]),
        Case(text: "dump:\(SIGPIPE)", features: [], rejected: ["dump:\(SIGPIPE)"]),
        Case(text: "dump:\(SIGALRM)", features: [], rejected: ["dump:\(SIGALRM)"]),
        Case(text: "dump:\(SIGTSTP)", features: [], rejected: ["dump:\(SIGTSTP)"]),
        Case(text: "dump:32", features: [], rejected: ["dump:32"]), // glibc's own (thread cancellation)
        Case(text: "dump:\(rtMin + 6)", features: [], rejected: ["dump:\(rtMin + 6)"]), // the hang sampler's
        Case(text: "dump:\(rtMin + 1)", features: [.dumpOnSignal, .waits], dumpSignal: rtMin + 1),
        Case(text: "dump:\(rtMax)", features: [.dumpOnSignal, .waits], dumpSignal: rtMax),
        Case(text: "dump:\(rtMax + 1)", features: [], rejected: ["dump:\(rtMax + 1)"]),
        Case(text: "dump:winch", features: [.dumpOnSignal, .waits], dumpSignal: SIGWINCH),
        Case(text: "dump:SIGPWR", features: [.dumpOnSignal, .waits], dumpSignal: SIGPWR),
        Case(text: "dump:\(SIGQUIT)", features: [.dumpOnSignal, .waits], dumpSignal: SIGQUIT),
        Case(text: "flight", features: [.flightRecorder, .trace, .waits], flightWindow: .seconds(30)),
        Case(text: "flight:5s", features: [.flightRecorder, .trace, .waits], flightWindow: .seconds(5)),
        Case(text: "flight:0", features: [], rejected: ["flight:0"]),
        // Issue 49: a window shorter than 100 ms keeps next to nothing.
        Case(text: "flight:1ns", features: [], rejected: ["flight:1ns"]),
        Case(text: "flight:99ms, trace", features: .trace, rejected: ["flight:99ms"]),
        Case(text: "flight:100ms", features: [.flightRecorder, .trace, .waits], flightWindow: .milliseconds(100)),
    ]

    func testTheParserAcceptsSpacesAndAnyCaseAndRejectsWholeItems() {
        for c in Self.table {
            let parsed = DiagnosticsConfiguration(parsing: c.text)
            let what = "TK_DIAGNOSTICS=\"\(c.text)\""
            XCTAssertEqual(parsed.features, c.features, what)
            XCTAssertEqual(parsed.off, c.off, what)
            XCTAssertEqual(parsed.hangThreshold, c.threshold, what)
            XCTAssertEqual(parsed.dumpSignal, c.dumpSignal, what)
            XCTAssertEqual(parsed.flightWindow, c.flightWindow, what)
            XCTAssertEqual(parsed.rejected, c.rejected.count, what)
            let lines = parsed.warning.map { $0.split(separator: "\n").map(String.init) } ?? []
            XCTAssertEqual(lines.count, c.rejected.count, "\(what): \(lines)")
            for (line, item) in zip(lines, c.rejected) {
                XCTAssertTrue(line.contains("\"\(item)\""), "\(what): the line must name the item: \(line)")
                XCTAssertTrue(line.contains("accepted: lockorder, lockorder:fatal, hangs, hangs:250ms"), "\(what): \(line)")
            }
        }
    }

    func testShutdownSignalsAndShortFlightWindowsAreRefusedSayingWhy() {
        for item in ["dump:SIGTERM", "dump:int", "dump:1"] {
            let warning = DiagnosticsConfiguration(parsing: item).warning ?? ""
            XCTAssertTrue(warning.contains("dump takes no shutdown signal"), "\(item): \(warning)")
            XCTAssertTrue(warning.contains("would no longer stop the process"), "\(item): \(warning)")
        }
        let other = DiagnosticsConfiguration(parsing: "dump:SIGCHLD").warning ?? ""
        XCTAssertTrue(other.contains("dump takes SIGUSR2, SIGUSR1, SIGQUIT, SIGWINCH, SIGPWR or a real-time signal"), other)
        let flight = DiagnosticsConfiguration(parsing: "flight:1ns").warning ?? ""
        XCTAssertTrue(flight.contains("flight takes a window of at least 100ms"), flight)
    }

    /// `dump:SIGTERM` (or `dump:SIGINT`) once made the process catch the signal for thread dumps
    /// and survive `kill -TERM`. Refused now: the child is named the item on stderr and killed
    /// by the signal it sends itself.
    func testARefusedShutdownSignalStillStopsTheProcess() throws {
        for (item, signo) in [("dump:SIGTERM", SIGTERM), ("dump:sigint", SIGINT), ("dump:HUP", SIGHUP)] {
            let result = try ChildProcess.run("signal-self", ["\(signo)"], environment: ["TK_DIAGNOSTICS": item])
            let output = result.standardOutput
            let errors = result.standardError
            XCTAssertTrue(result.signalled, "\(item): the process survived: \(output) \(errors)")
            XCTAssertEqual(result.status, signo, "\(item): \(output) \(errors)")
            XCTAssertFalse(output.contains("survived"), "\(item): \(output)")
            XCTAssertFalse(errors.contains("ThreadKit thread dump"), "\(item): the signal was taken for a dump: \(errors)")
            let lines = errors.split(separator: "\n").filter { $0.contains("TK_DIAGNOSTICS") }
            XCTAssertEqual(lines.count, 1, "\(item): one line, naming it: \(errors)")
            XCTAssertTrue(lines.first?.contains("\"\(item)\"") == true, "\(item): \(errors)")
            XCTAssertTrue(lines.first?.contains("dump takes no shutdown signal") == true, "\(item): \(errors)")
        }
    }

    func testRejectedItemsAreNamedWithControlBytesMaskedAndLongItemsCut() {
        let parsed = DiagnosticsConfiguration(parsing: "bad\u{1B}[31m, " + String(repeating: "x", count: 500))
        let lines = parsed.warning?.split(separator: "\n").map(String.init) ?? []
        XCTAssertEqual(lines.count, 2)
        XCTAssertTrue(lines.first?.contains("\"bad?[31m\"") == true, "\(lines)")
        XCTAssertFalse(parsed.warning?.contains("\u{1B}") ?? true)
        XCTAssertTrue(lines.last?.contains(String(repeating: "x", count: 80) + "...\"") == true, "\(lines)")
        XCTAssertLessThan(lines.last?.count ?? .max, 600) // the item cut at 80 bytes, plus the accepted forms
    }

    /// A child process started with the variable: the switch it got and what it said on stderr.
    func testAChildProcessNamesEachRejectedItemOnceAndEnablesNothingOfIt() throws {
        let result = try ChildProcess.run(
            "diagnostics-config", environment: ["TK_DIAGNOSTICS": " Hangs:100ms , CONTENTION,lockorder:f, trace:x"])
        let output = result.standardOutput
        let errors = result.standardError
        XCTAssertEqual(result.status, 0, output + errors)

        let features = output.split(separator: "\n").first { $0.hasPrefix("ThreadKit diagnostics: ") } ?? ""
        XCTAssertTrue(features.contains("hangs"), output)
        XCTAssertTrue(features.contains("contention"), output)
        XCTAssertFalse(features.contains("lockorder:fatal"), "a rejected option must not turn fatal mode on: \(output)")
        XCTAssertFalse(features.contains("trace"), output)
        XCTAssertTrue(output.contains("threshold-ns 100000000"), output)

        let lines = errors.split(separator: "\n").filter { $0.contains("TK_DIAGNOSTICS") }
        XCTAssertEqual(lines.count, 2, "one line per rejected item, once: \(errors)")
        XCTAssertEqual(lines.filter { $0.contains("\"lockorder:f\"") }.count, 1, errors)
        XCTAssertEqual(lines.filter { $0.contains("\"trace:x\"") }.count, 1, errors)
        XCTAssertTrue(lines.allSatisfy { $0.contains("accepted: lockorder, lockorder:fatal, hangs") }, errors)
    }
}
