// Every operation misuse diagnostic (SPEC §7, RELIABILITY.md "Misuse"), each in a child process:
// the process must stop and standard error must name the operation or queue, the call and the fix.
import XCTest

final class OperationMisuseTests: XCTestCase {
    private func assertMisuse(_ role: String, mentions fragments: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try ChildProcess.run(role)
        XCTAssertTrue(result.signalled || result.status != 0,
                      "\(role) kept running after the misuse (status \(result.status))", file: file, line: line)
        XCTAssertTrue(result.standardError.contains("ThreadKit misuse:"), "stderr was: \(result.standardError)", file: file, line: line)
        for fragment in fragments + ["Fix:"] {
            XCTAssertTrue(result.standardError.contains(fragment), "stderr lacks \"\(fragment)\": \(result.standardError)",
                          file: file, line: line)
        }
    }

    func testAddingAnOperationTwiceStopsTheProcess() throws {
        try assertMisuse("operation-add-twice", mentions: ["TKOperationQueue \"uploads\".addOperation(_:)", "TKBlockOperation \"upload\"",
                                                           "already added to this queue"])
    }

    func testAddingAnOperationToTwoQueuesStopsTheProcess() throws {
        try assertMisuse("operation-two-queues", mentions: ["TKOperationQueue \"thumbnails\".addOperation(_:)", "TKBlockOperation \"resize\"",
                                                            "TKOperationQueue \"uploads\""])
    }

    func testAddingAFinishedOperationStopsTheProcess() throws {
        try assertMisuse("operation-add-finished", mentions: ["TKOperationQueue \"late\"", "TKBlockOperation \"done\"", "finished"])
    }

    func testStartingTwiceStopsTheProcess() throws {
        try assertMisuse("operation-start-twice", mentions: ["TKBlockOperation \"twice\".start()"])
    }

    func testStartingAnOperationThatIsNotReadyStopsTheProcess() throws {
        try assertMisuse("operation-start-not-ready", mentions: ["TKBlockOperation \"decode\".start()", "1 of its dependencies"])
    }

    func testStartingAQueuedOperationByHandStopsTheProcess() throws {
        try assertMisuse("operation-start-queued", mentions: ["TKBlockOperation \"parse\".start()", "TKOperationQueue \"parsers\""])
    }

    func testAnOperationWaitingForItselfStopsTheProcess() throws {
        try assertMisuse("operation-wait-self", mentions: ["TKBlockOperation \"selfish\".waitUntilFinished()", "itself"])
    }

    func testWaitingForAQueueFromItsOwnOperationStopsTheProcess() throws {
        try assertMisuse("operation-queue-wait-inside", mentions: ["TKOperationQueue \"importer\".waitUntilAllOperationsAreFinished()",
                                                                   "its own operations"])
    }

    func testWaitingInsideASerialQueueForAnOperationBehindStopsTheProcess() throws {
        try assertMisuse("operation-serial-wait-behind", mentions: ["TKBlockOperation \"later\".waitUntilFinished()",
                                                                    "TKOperationQueue \"serial-db\""])
    }

    func testWaitingOnTheMainThreadForTheMainQueueStopsTheProcess() throws {
        try assertMisuse("operation-main-wait-on-main", mentions: ["TKOperationQueue.main.waitUntilAllOperationsAreFinished()", "main thread"])
    }

    func testFinishingTwiceStopsTheProcess() throws {
        try assertMisuse("operation-finish-twice", mentions: ["Twice \"fetch\".finish()", "already finished"])
    }

    func testAddingAnExecutionBlockAfterStartStopsTheProcess() throws {
        try assertMisuse("operation-block-after-start", mentions: ["TKBlockOperation \"thumbs\".addExecutionBlock(_:)"])
    }

    func testANegativeLimitStopsTheProcess() throws {
        try assertMisuse("operation-negative-limit", mentions: ["TKOperationQueue \"bad\".maxConcurrentOperationCount = -2"])
    }
}
