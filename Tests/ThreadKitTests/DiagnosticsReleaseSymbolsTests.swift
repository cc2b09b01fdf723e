// Reports name the code in a release build (docs/Diagnostics.md §7, issue 50): for each report
// kind — blocking, lock order, hang, thread dump with a deadlock, contention, TKThread's call
// stack — a RELEASE build of ThreadKitTestChild (SymbolicationRoles.swift) makes the report, and
// its call-site line must name the child's `@inline(never)` function, which only `.symtab` and
// DWARF know (it is not exported).
//
// The release child: $TK_RELEASE_TEST_CHILD, else `ThreadKitTestChild` in the release directory
// beside this bundle's (`swift build -c release --product ThreadKitTestChild`, which CI runs
// before the tests). Without one the tests skip, saying how to build it: a release build takes
// minutes, too long to start from inside a test.
import Foundation
import XCTest

final class DiagnosticsReleaseSymbolsTests: XCTestCase {
    private static var releaseChild: URL? {
        if let path = ProcessInfo.processInfo.environment["TK_RELEASE_TEST_CHILD"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        let bundleDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        guard bundleDirectory.lastPathComponent != "release" else { return bundleDirectory.appendingPathComponent("ThreadKitTestChild") }
        let sibling = bundleDirectory.deletingLastPathComponent().appendingPathComponent("release/ThreadKitTestChild")
        return FileManager.default.isExecutableFile(atPath: sibling.path) ? sibling : nil
    }

    /// Runs `role` in the release child and returns the `CALL SITE:` lines (and the whole output,
    /// for failure messages).
    private func callSites(_ role: String, file: StaticString = #filePath, line: UInt = #line) throws -> (sites: [String], output: String) {
        guard let child = Self.releaseChild, FileManager.default.isExecutableFile(atPath: child.path) else {
            throw XCTSkip(
                "no release build of ThreadKitTestChild: run `swift build -c release --product ThreadKitTestChild` first "
                    + "(or set TK_RELEASE_TEST_CHILD to its path)")
        }
        let result = try ChildProcess.run(role, environment: ["TK_DIAGNOSTICS": "off"], child: child)
        let text = result.standardOutput + result.standardError
        XCTAssertEqual(result.status, 0, "\(role) made no report:\n\(text)", file: file, line: line)
        let sites = text.split(separator: "\n").filter { $0.hasPrefix("CALL SITE: ") }.map { String($0.dropFirst(11)) }
        return (sites, text)
    }

    private func assertNames(
        _ role: String, _ functions: [String], file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let (sites, output) = try callSites(role, file: file, line: line)
        XCTAssertEqual(sites.count, functions.count, "call sites of \(role):\n\(output)", file: file, line: line)
        for function in functions {
            XCTAssertTrue(
                sites.contains { $0.contains(function) && $0.contains("ThreadKitTestChild") },
                "\(role): no call site names \(function):\n\(output)", file: file, line: line)
        }
    }

    func testBlockingReportNamesTheCallSite() throws {
        try assertNames("named-blocking", ["lockOnceInReleaseChild"])
    }

    func testLockOrderReportNamesBothCallSites() throws {
        try assertNames("named-lock-order", ["takeBThenAInReleaseChild", "takeAThenBInReleaseChild"])
    }

    func testHangReportNamesTheStuckFunction() throws {
        try assertNames("named-hang", ["spinUntilReportedInReleaseChild"])
    }

    func testThreadDumpNamesBothDeadlockedFunctions() throws {
        let (sites, output) = try callSites("named-deadlock")
        XCTAssertEqual(sites.count, 2, output)
        for function in ["deadlockLeftInReleaseChild", "deadlockRightInReleaseChild"] {
            XCTAssertTrue(sites.contains { $0.contains(function) }, "no call site names \(function):\n\(output)")
        }
    }

    func testContentionRowNamesTheLongestWait() throws {
        try assertNames("named-contention", ["lockOnceInReleaseChild"])
    }

    func testCallStackSymbolsNameTheCaller() throws {
        try assertNames("named-call-stack", ["callStackInReleaseChild"])
    }
}
