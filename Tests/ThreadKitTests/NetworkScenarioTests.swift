// The seeds' network scenarios (issue 13), each run as `threadkit tour NAME` in a child process:
// the scenario's judge is its own plain-POSIX HTTP server (Sources/threadkit/Support/
// TinyHTTPServer.swift), which counts requests, full responses and responses cut short, and
// checks every body byte against its pattern; a scenario exits non-zero unless its verdict holds.
// Run as child processes because the scenarios own their threads' run loops from start to end.
import Foundation
import XCTest

final class NetworkScenarioTests: XCTestCase {
    private func runScenario(_ name: String, expecting lines: [String]) throws {
        let result = try ChildProcess.runCommand(["tour", name], timeout: .seconds(120))
        let output = result.standardOutput + result.standardError
        XCTAssertEqual(result.status, 0, "tour \(name) failed:\n\(output)")
        XCTAssertTrue(output.contains("✔ verdict: PASS"), output)
        for line in lines { XCTAssertTrue(output.contains(line), "missing \"\(line)\" in:\n\(output)") }
    }

    /// Seed 001: code 1 and code 2 get no delegate call at all; code 3 gets the whole response on
    /// the background thread.
    func testABackgroundRequestIsAnsweredOnlyWhenScheduledBeforeTheLoopRuns() throws {
        try runScenario(
            "background-request",
            expecting: [
                "code 1 (start, then return: the thread's loop never runs): the thread has ended; the server read 0 request(s); delegate calls: none",
                "code 2 (run the loop first, then schedule and start): the thread has ended; the server read 0 request(s); delegate calls: none",
                "code 3's 20000 body bytes match the server's pattern",
            ])
    }

    /// Seeds 001 and 004: three concurrent requests on one resident thread, one cancelled, exact
    /// bytes for the other two, and the thread leaving its loop through shouldKeepRunning.
    func testTheResidentNetworkThreadServesThreeRequestsAndStopsCleanly() throws {
        try runScenario(
            "resident-network-thread",
            expecting: [
                "A: 200, 60000 bytes, received 60000 body bytes, finished",
                "B: 200, 60000 bytes, received 60000 body bytes, finished",
                "no more callbacks after cancel",
                "every callback ran on the AFNetworking thread",
            ])
    }

    /// 100 clients and their server on one loop thread: every byte back, no descriptor left open.
    func testAnEchoServerAndAHundredClientsOnOneLoopThread() throws {
        try runScenario("echo-server", expecting: ["100 exact, 0 failed"])
    }
}
