// Thread starts refused by the OS (issue 15, item 6), in a child process that may create no
// thread: it runs as user nobody with RLIMIT_NPROC at 0 (root ignores that limit; see
// Tests/ThreadKitTestChild/ThreadLimitRoles.swift). TKThread.startOrThrow() throws a TKError naming
// EAGAIN; start() reports the same through the uncaught-error handler; the pool and the dispatch
// manager each report once however often they fail; and once the limit is lifted, the work
// queued meanwhile (pool blocks of two tiers and an asyncAfter) runs with nothing more submitted:
// the child's own semaphore waits drive the retries.
import Foundation
import XCTest

final class ThreadLimitTests: XCTestCase {
    func testQueuedWorkRunsOnceThreadsAreAvailableAndEachFailureIsReportedOnce() throws {
        let result = try ChildProcess.run("thread-limit", timeout: .seconds(120))
        let out = result.standardOutput
        let err = result.standardError
        XCTAssertEqual(result.status, 0, "stdout: \(out)\nstderr: \(err)")
        XCTAssertTrue(out.contains("startOrThrow: systemCall errno=\(EAGAIN)"), out)
        XCTAssertTrue(out.contains("pthread_create failed with EAGAIN"), out)
        XCTAssertTrue(out.contains("start() finished=true"), out)
        XCTAssertTrue(out.contains("before the limit is lifted: ran=false"), out)
        XCTAssertTrue(out.contains("after the limit is lifted: ran 4 of 4, timer fired=true"), out)
        func lines(_ fragment: String) -> Int { err.components(separatedBy: "\n").filter { $0.contains(fragment) }.count }
        XCTAssertEqual(lines("ThreadKit: uncaught error in TKThread"), 1, err)
        XCTAssertEqual(lines("the dispatch pool could not start a worker thread"), 1, err)
        XCTAssertEqual(lines("the dispatch manager thread (asyncAfter, timer and descriptor sources) could not be started"), 1, err)
        XCTAssertEqual(lines("the dispatch pool started a worker thread again"), 1, err)
    }
}
