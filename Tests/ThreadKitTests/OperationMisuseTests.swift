// Every operation misuse diagnostic (SPEC §7, RELIABILITY.md "Misuse"), each in a child process:
// the process must stop and standard error must name the operation or queue, the call and the fix.
import XCTest

final class OperationMisuseTests: XCTestCase {
    /// Every operation misuse message names the fix.
    private func assertOperationMisuse(
        _ role: String, mentions fragments: [String], file: StaticString = #filePath,
        line: UInt = #line
    ) throws {
        try assertMisuse(role, mentions: fragments + ["Fix:"], file: file, line: line)
    }

    func testAddingAnOperationTwiceStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-add-twice",
            mentions: [
                "TKOperationQueue \"uploads\".addOperation(_:)", "TKBlockOperation \"upload\"",
                "already added to this queue",
            ])
    }

    func testAddingAnOperationToTwoQueuesStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-two-queues",
            mentions: [
                "TKOperationQueue \"thumbnails\".addOperation(_:)", "TKBlockOperation \"resize\"",
                "TKOperationQueue \"uploads\"",
            ])
    }

    func testAddingAFinishedOperationStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-add-finished", mentions: ["TKOperationQueue \"late\"", "TKBlockOperation \"done\"", "finished"])
    }

    func testStartingTwiceStopsTheProcess() throws {
        try assertOperationMisuse("operation-start-twice", mentions: ["TKBlockOperation \"twice\".start()"])
    }

    func testStartingAnOperationThatIsNotReadyStopsTheProcess() throws {
        try assertOperationMisuse("operation-start-not-ready", mentions: ["TKBlockOperation \"decode\".start()", "1 of its dependencies"])
    }

    func testStartingAQueuedOperationByHandStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-start-queued", mentions: ["TKBlockOperation \"parse\".start()", "TKOperationQueue \"parsers\""])
    }

    func testAnOperationWaitingForItselfStopsTheProcess() throws {
        try assertOperationMisuse("operation-wait-self", mentions: ["TKBlockOperation \"selfish\".waitUntilFinished()", "itself"])
    }

    func testWaitingForAQueueFromItsOwnOperationStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-queue-wait-inside",
            mentions: [
                "TKOperationQueue \"importer\".waitUntilAllOperationsAreFinished()",
                "its own operations",
            ])
    }

    func testWaitingInsideASerialQueueForAnOperationBehindStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-serial-wait-behind",
            mentions: [
                "TKBlockOperation \"later\".waitUntilFinished()",
                "TKOperationQueue \"serial-db\"",
            ])
    }

    func testWaitingOnTheMainThreadForTheMainQueueStopsTheProcess() throws {
        try assertOperationMisuse(
            "operation-main-wait-on-main", mentions: ["TKOperationQueue.main.waitUntilAllOperationsAreFinished()", "main thread"])
    }

    func testFinishingTwiceStopsTheProcess() throws {
        try assertOperationMisuse("operation-finish-twice", mentions: ["Twice \"fetch\".finish()", "already finished"])
    }

    func testAddingAnExecutionBlockAfterStartStopsTheProcess() throws {
        try assertOperationMisuse("operation-block-after-start", mentions: ["TKBlockOperation \"thumbs\".addExecutionBlock(_:)"])
    }

    func testANegativeLimitStopsTheProcess() throws {
        try assertOperationMisuse("operation-negative-limit", mentions: ["TKOperationQueue \"bad\".maxConcurrentOperationCount = -2"])
    }
}
