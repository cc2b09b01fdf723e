// Hang reports (docs/Diagnostics.md §2): a dispatch work item, an operation and the main thread's
// run-loop pass that run past the threshold are reported, within twice the threshold, with the
// stuck thread's id and a call stack sampled from it. The stuck work spins (yielding) on a flag
// until the test has its report: a wait inside libdispatch would do, but the unwinder cannot
// walk out of libdispatch's frames, so the stuck frame would not be in the sample.
import Foundation
import Synchronization
import ThreadKit
import XCTest

/// Set by a hang test once it has its report.
final class ReleaseFlag: @unchecked Sendable {
    let released = Atomic<Bool>(false)
    func signal() { released.store(true, ordering: .releasing) }
}

/// The frame the hang tests look for in the sampled stack: stuck until released (at most 60 s).
@inline(never)
func blockedInHangTest(_ release: ReleaseFlag) {
    let end = ContinuousClock.now + .seconds(60)
    while !release.released.load(ordering: .acquiring) && ContinuousClock.now < end { sched_yield() }
}

final class DiagnosticsHangTests: XCTestCase {
    private var collector = ReportCollector()
    private let threshold: Duration = .milliseconds(300)

    override func setUp() {
        collector = ReportCollector()
        collector.install()
        TKDiagnostics.resetReports()
        TKDiagnostics.hangThreshold = threshold
        TKDiagnostics.enable(.hangs)
    }

    override func tearDown() {
        TKDiagnostics.disable(.hangs)
        TKDiagnostics.hangThreshold = .milliseconds(250)
        collector.stop()
    }

    private func assertReport(
        _ report: TKHangReport, tid: Int32, activity: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(Int32(report.threadID), tid, "the report names another thread", file: file, line: line)
        XCTAssertTrue(report.activity.contains(activity), report.activity, file: file, line: line)
        XCTAssertGreaterThanOrEqual(report.duration, threshold, "reported early", file: file, line: line)
        XCTAssertLessThan(report.duration, threshold * 2, "detected later than twice the threshold", file: file, line: line)
        XCTAssertTrue(
            report.callStack.contains { $0.contains("blockedInHangTest") },
            "the sampled stack lacks the stuck frame:\n\(report.callStack.joined(separator: "\n"))", file: file, line: line)
        XCTAssertTrue(report.description.contains("ThreadKit hang"), file: file, line: line)
    }

    func testAStuckWorkItemIsReportedWithItsThreadAndStack() {
        let queue = TKDispatchQueue(label: "diagnostics.stuck")
        let release = ReleaseFlag()
        let finished = DispatchSemaphore(value: 0)
        let tid = Atomic32()
        queue.async {
            tid.store(KernelThread.currentID())
            blockedInHangTest(release)
            finished.signal()
        }
        XCTAssertTrue(collector.waitForHang(), "no hang report")
        release.signal()
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success)
        guard let report = collector.hangReports.first else { return }
        assertReport(report, tid: tid.load(), activity: "queue \"diagnostics.stuck\"")
        XCTAssertEqual(collector.hangReports.count, 1, "one report per stuck item")
    }

    func testAStuckOperationIsReported() {
        let queue = TKOperationQueue()
        let release = ReleaseFlag()
        let tid = Atomic32()
        let operation = TKBlockOperation {
            tid.store(KernelThread.currentID())
            blockedInHangTest(release)
        }
        operation.name = "slow import"
        queue.addOperation(operation)
        XCTAssertTrue(collector.waitForHang(), "no hang report")
        release.signal()
        queue.waitUntilAllOperationsAreFinished()
        guard let report = collector.hangReports.first else { return }
        assertReport(report, tid: tid.load(), activity: "\"slow import\"")
    }

    /// A thread inherits its creator's signal mask, and libdispatch's workers (where Swift
    /// concurrency's jobs run) block every signal: a ThreadKit thread started from one must still
    /// accept the sampling signal (SIGRTMIN+6), or its hangs are reported without a stack.
    func testAThreadStartedFromOneThatBlocksEverySignalCanBeSampled() {
        let blockedInCreator = Atomic32()
        let blockedInThread = Atomic32()
        let done = DispatchSemaphore(value: 0)
        let creator = Thread {
            var all = sigset_t()
            var old = sigset_t()
            sigfillset(&all)
            pthread_sigmask(SIG_BLOCK, &all, &old)
            var mask = sigset_t()
            pthread_sigmask(SIG_BLOCK, nil, &mask)
            blockedInCreator.store(sigismember(&mask, __libc_current_sigrtmin() + 6))
            TKThread {
                var mine = sigset_t()
                pthread_sigmask(SIG_BLOCK, nil, &mine)
                blockedInThread.store(sigismember(&mine, __libc_current_sigrtmin() + 6))
                done.signal()
            }.start()
            pthread_sigmask(SIG_SETMASK, &old, nil)
        }
        creator.start()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(blockedInCreator.load(), 1, "the creating thread did not block the signal")
        XCTAssertEqual(blockedInThread.load(), 0, "the ThreadKit thread inherited the blocked sampling signal")
    }

    func testTheMainLoopNotReachingAWaitIsReported() throws {
        let result = try ChildProcess.run("main-loop-hang")
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(result.standardOutput.contains("hang reports: 1"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("main true"), "not the main thread: \(result.standardOutput)")
        XCTAssertTrue(result.standardError.contains("run-loop pass"), result.standardError)
        XCTAssertTrue(result.standardError.contains("stallTheMainLoop"), result.standardError)
    }
}

/// An Int32 shared between a test and the thread it observes (guarded by an NSLock).
final class Atomic32: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int32 = -1
    func store(_ new: Int32) { lock.withLock { value = new } }
    func load() -> Int32 { lock.withLock { value } }
}
