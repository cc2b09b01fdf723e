// Every operation misuse diagnostic (SPEC §7, RELIABILITY.md "Misuse"), each an exit test: the
// misuse runs in a child process of the test runner, which must stop with standard error naming the
// operation or queue, the call and the fix. (Foundation on Linux hangs forever on the wait cases
// and says nothing on most others.) Waiting on the main thread for the main queue needs the
// process's main thread, which an exit test's body does not run on: that one stays a role of
// Tests/ThreadKitTestChild.
import Testing
import ThreadKit
import XCTest

@Suite struct OperationMisuseTests {
    @Test func addingAnOperationTwiceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("upload")
            suspendedQueue("uploads", holding: op).addOperation(op)
        }
        expectMisuse(
            result,
            mentions: ["TKOperationQueue \"uploads\".addOperation(_:)", "TKBlockOperation \"upload\"", "already added to this queue"] + [
                "Fix:"
            ])
    }

    @Test func addingAnOperationToTwoQueuesStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("resize")
            let first = suspendedQueue("uploads", holding: op)
            withExtendedLifetime(first) { namedQueue("thumbnails").addOperation(op) }
        }
        expectMisuse(
            result,
            mentions: ["TKOperationQueue \"thumbnails\".addOperation(_:)", "TKBlockOperation \"resize\"", "TKOperationQueue \"uploads\""]
                + ["Fix:"])
    }

    @Test func addingAFinishedOperationStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("done")
            op.start()
            namedQueue("late").addOperation(op)
        }
        expectMisuse(result, mentions: ["TKOperationQueue \"late\"", "TKBlockOperation \"done\"", "finished"] + ["Fix:"])
    }

    @Test func startingTwiceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("twice")
            op.start()
            op.start()
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"twice\".start()"] + ["Fix:"])
    }

    @Test func startingAnOperationThatIsNotReadyStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("decode")
            try? op.addDependency(namedOperation("download"))
            op.start()
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"decode\".start()", "1 of its dependencies"] + ["Fix:"])
    }

    @Test func startingAQueuedOperationByHandStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("parse")
            let queue = suspendedQueue("parsers", holding: op)
            withExtendedLifetime(queue) { op.start() }
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"parse\".start()", "TKOperationQueue \"parsers\""] + ["Fix:"])
    }

    @Test func anOperationWaitingForItselfStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = OperationBox()
            let op = TKBlockOperation { box.operation?.waitUntilFinished() }
            op.name = "selfish"
            box.operation = op
            op.start()
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"selfish\".waitUntilFinished()", "itself"] + ["Fix:"])
    }

    @Test func waitingForAQueueFromItsOwnOperationStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = namedQueue("importer")
            queue.addOperation { queue.waitUntilAllOperationsAreFinished() }
            queue.waitUntilAllOperationsAreFinished()
        }
        expectMisuse(
            result, mentions: ["TKOperationQueue \"importer\".waitUntilAllOperationsAreFinished()", "its own operations"] + ["Fix:"])
    }

    @Test func waitingInsideASerialQueueForAnOperationBehindStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = namedQueue("serial-db")
            queue.maxConcurrentOperationCount = 1
            let later = namedOperation("later")
            queue.isSuspended = true // both in the queue before the first one waits
            queue.addOperation { later.waitUntilFinished() }
            queue.addOperation(later)
            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"later\".waitUntilFinished()", "TKOperationQueue \"serial-db\""] + ["Fix:"])
    }

    @Test func finishingTwiceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = FinishesTwice()
            op.name = "fetch"
            op.start()
        }
        expectMisuse(result, mentions: ["Twice \"fetch\".finish()", "already finished"] + ["Fix:"])
    }

    @Test func addingAnExecutionBlockAfterStartStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = namedOperation("thumbs")
            op.start()
            op.addExecutionBlock {}
        }
        expectMisuse(result, mentions: ["TKBlockOperation \"thumbs\".addExecutionBlock(_:)"] + ["Fix:"])
    }

    @Test func aNegativeLimitStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            namedQueue("bad").maxConcurrentOperationCount = -2
        }
        expectMisuse(result, mentions: ["TKOperationQueue \"bad\".maxConcurrentOperationCount = -2"] + ["Fix:"])
    }
}

/// An operation named `name`, with an empty block.
private func namedOperation(_ name: String) -> TKBlockOperation {
    let op = TKBlockOperation {}
    op.name = name
    return op
}

/// A queue named `name`.
private func namedQueue(_ name: String) -> TKOperationQueue {
    let queue = TKOperationQueue()
    queue.name = name
    return queue
}

/// A suspended queue named `name` to which `op` was added (so it waits there, never started).
private func suspendedQueue(_ name: String, holding op: TKOperation) -> TKOperationQueue {
    let queue = namedQueue(name)
    queue.isSuspended = true
    queue.addOperation(op)
    return queue
}

/// Lets an operation's block reach its own operation.
private final class OperationBox: @unchecked Sendable {
    // safety: written once before the operation starts, read by its block afterwards (start()
    // publishes it).
    var operation: TKOperation?
}

/// An asynchronous operation that calls finish() twice: a misuse.
private final class FinishesTwice: TKOperation, @unchecked Sendable {
    // safety: no stored state of its own.
    override var isAsynchronous: Bool { true }
    override func start() {
        finish()
        finish()
    }
}

final class OperationMainQueueMisuseTests: XCTestCase {
    func testWaitingOnTheMainThreadForTheMainQueueStopsTheProcess() throws {
        try assertMisuse(
            "operation-main-wait-on-main", mentions: ["TKOperationQueue.main.waitUntilAllOperationsAreFinished()", "main thread", "Fix:"])
    }
}
