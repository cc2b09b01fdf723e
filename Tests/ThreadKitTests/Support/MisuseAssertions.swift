// MisuseAssertions: the one check every misuse test makes (RELIABILITY.md "Misuse"): the process
// stopped, and standard error carries ThreadKit's misuse banner and every given fragment (the
// object, the call, the fix). Most misuses are swift-testing exit tests, written in place:
//
//     let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
//         TKDispatchSemaphore(value: -1) // the misuse, run in a child process of the test runner
//     }
//     expectMisuse(result, mentions: ["TKDispatchSemaphore(value: -1)", "Fix:"])
//
// assertMisuse runs a role of Tests/ThreadKitTestChild instead, for the few misuses that need a
// program of their own (the process's main thread, or an environment set before it starts).
import Testing
import XCTest

/// The exit test's child stopped (`#expect(processExitsWith: .failure)` judged that) and its
/// standard error names the misuse and each fragment. A nil result (the process exited cleanly, or
/// never started) was already recorded as a failure by the `#expect`.
func expectMisuse(_ result: ExitTest.Result?, mentions fragments: [String], sourceLocation: SourceLocation = #_sourceLocation) {
    guard let result else { return }
    let standardError = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(standardError.contains("ThreadKit misuse:"), "stderr was: \(standardError)", sourceLocation: sourceLocation)
    for fragment in fragments {
        #expect(standardError.contains(fragment), "stderr lacks \"\(fragment)\": \(standardError)", sourceLocation: sourceLocation)
    }
}

/// `ThreadKitTestChild role` stopped, and its standard error names the misuse and each fragment.
func assertMisuse(_ role: String, mentions fragments: [String], file: StaticString = #filePath, line: UInt = #line) throws {
    let result = try ChildProcess.run(role)
    XCTAssertTrue(
        result.signalled || result.status != 0,
        "\(role) kept running after the misuse (status \(result.status))", file: file, line: line)
    XCTAssertTrue(result.standardError.contains("ThreadKit misuse:"), "stderr was: \(result.standardError)", file: file, line: line)
    for fragment in fragments {
        XCTAssertTrue(
            result.standardError.contains(fragment), "stderr lacks \"\(fragment)\": \(result.standardError)",
            file: file, line: line)
    }
}
