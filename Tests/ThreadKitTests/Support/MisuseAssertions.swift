// MisuseAssertions: the one check every misuse exit test makes on a child process (RELIABILITY.md
// "Misuse"): the process stopped, and standard error carries ThreadKit's misuse banner and every
// given fragment (the object, the call, the fix). Suites with a private copy of this method can
// drop it: their calls then reach this function unchanged.
import XCTest

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
