// Every dispatch misuse diagnostic (SPEC §6, RELIABILITY.md "Misuse"), each in a child process:
// the process must stop and standard error must name the object, the call and the fix. libdispatch
// dies with SIGILL and no message on each of these.
import XCTest

final class DispatchMisuseTests: XCTestCase {
    func testSyncOntoTheCurrentQueueStopsTheProcess() throws {
        try assertMisuse("dispatch-sync-current", mentions: ["TKDispatchQueue \"photos\".sync", "deadlock", "Fix:"])
    }

    /// The tour's gcd-sync-deadlock scenario narrates the child's diagnostic line, not the crash
    /// report the runtime adds after it (the tour itself runs with the backtracer enabled).
    func testTheSyncDeadlockTourScenarioShowsTheDiagnosticNotTheBacktrace() throws {
        let result = try ChildProcess.runCommand(["tour", "gcd-sync-deadlock"], backtracer: true)
        XCTAssertEqual(result.status, 0, "tour failed: \(result.standardOutput)")
        XCTAssertTrue(result.standardOutput.contains("verdict: PASS"), result.standardOutput)
        let diagnostic = result.standardOutput.split(separator: "\n").filter { $0.contains("ThreadKit misuse:") }
        XCTAssertEqual(diagnostic.count, 1, "the diagnostic should be narrated once: \(result.standardOutput)")
        XCTAssertTrue(diagnostic.first?.contains("TKDispatchQueue \"photos\".sync") ?? false, result.standardOutput)
        for crashReport in ["Backtracing", "Program crashed", "Registers:", "Fatal error", "Thread 0"] {
            XCTAssertFalse(
                result.standardOutput.contains(crashReport) || result.standardError.contains(crashReport),
                "the child's crash report reached the tour's output (\(crashReport)): \(result.standardOutput)\n\(result.standardError)")
        }
    }

    func testSyncOntoAQueueWhoseTargetIsCurrentStopsTheProcess() throws {
        try assertMisuse(
            "dispatch-sync-target", mentions: ["TKDispatchQueue \"child\".sync", "TKDispatchQueue \"parent\"", "target chain"])
    }

    func testBarrierSyncFromInsideTheConcurrentQueueStopsTheProcess() throws {
        try assertMisuse("dispatch-sync-barrier-inside", mentions: ["TKDispatchQueue \"store\".sync(flags: .barrier)", "deadlock"])
    }

    func testSyncOntoTheMainQueueFromTheMainThreadStopsTheProcess() throws {
        try assertMisuse("dispatch-sync-main-on-main", mentions: ["main", "deadlock", "Fix:"])
    }

    func testAnUnbalancedLeaveStopsTheProcess() throws {
        try assertMisuse("dispatch-group-leave", mentions: ["TKDispatchGroup.leave()", "unbalanced", "Fix:"])
    }

    func testOverResumingAQueueStopsTheProcess() throws {
        try assertMisuse("dispatch-over-resume", mentions: ["TKDispatchQueue \"uploads\".resume()", "suspend()", "Fix:"])
    }

    func testOverResumingASourceStopsTheProcess() throws {
        try assertMisuse("dispatch-source-over-resume", mentions: ["TKDispatchSource", "resume()", "Fix:"])
    }

    func testANegativeSemaphoreStopsTheProcess() throws {
        try assertMisuse("dispatch-negative-semaphore", mentions: ["TKDispatchSemaphore(value: -1)", "Fix:"])
    }

    func testDispatchMainServesTheMainQueueForever() throws {
        let result = try ChildProcess.run("dispatch-main")
        XCTAssertEqual(result.status, 0, "stdout: \(result.standardOutput) stderr: \(result.standardError)")
        for i in 1...3 { XCTAssertTrue(result.standardOutput.contains("main queue item \(i)")) }
        XCTAssertTrue(result.standardOutput.contains("on main thread: 3"))
    }

    func testDispatchMainOffTheMainThreadStopsTheProcess() throws {
        try assertMisuse("dispatch-main-off-main", mentions: ["TKDispatch.main()", "not the main thread", "Fix:"])
    }

    func testASignalSourceCatchesSignalsForTheProcess() throws {
        // SIGTERM's default action would kill the child; with a source it is delivered instead.
        let result = try ChildProcess.run("dispatch-signal-source")
        XCTAssertEqual(result.status, 0, "stdout: \(result.standardOutput) stderr: \(result.standardError)")
        XCTAssertFalse(result.signalled)
        XCTAssertTrue(result.standardOutput.contains("caught SIGUSR1 and SIGTERM"))
    }
}
