// TKOperationQueue's token plan (docs/Operations.md, "Tokens"), decided under the queue's lock
// and tested here without running a token: a queue keeps at most one token looking, whatever the
// number of ready operations; a token inside an operation does not look; a caller about to pop
// again counts as looking. The hand-off that fans tokens out is driven by OperationQueueTests
// (blocked operations with a limit of 8 finish together; a limit is reached and never exceeded).
import Synchronization
import XCTest

@testable import ThreadKit

final class OperationTokenTests: XCTestCase {
    /// Runs `body` under the queue's lock with the queue seen as resumed, then restores the books
    /// (`suspended`, the token counts) so that nothing planned here is ever submitted.
    private func planning(_ queue: TKOperationQueue, _ body: (TKOperationQueue) -> Void) {
        queue.lock.lock()
        let saved = (queue.core.tokens, queue.core.tokensInOperations)
        queue.core.suspended = false
        body(queue)
        (queue.core.tokens, queue.core.tokensInOperations) = saved
        queue.core.suspended = true
        queue.lock.unlock()
    }

    func testManyReadyOperationsGetOneLookingTokenNotOneEach() {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        let ran = Counter()
        for _ in 0..<100 { queue.addOperation { ran.add() } }
        planning(queue) { q in
            XCTAssertEqual(q.core.ready.count, 100)
            XCTAssertEqual(q.core.tokens, 0, "a suspended queue submitted tokens")
            // Nobody looks: one token, not one per ready operation (up to the thread cap).
            XCTAssertEqual(q.planTokensLocked(qos: .default).tokens, 1)
            // That one is counted: a second plan adds nothing.
            XCTAssertEqual(q.core.tokens, 1)
            XCTAssertEqual(q.planTokensLocked(qos: .default).tokens, 0)
            // Once it is inside an operation it no longer looks: the next plan (the hand-off)
            // sends one more.
            q.core.tokensInOperations = 1
            XCTAssertEqual(q.planTokensLocked(qos: .default).tokens, 1)
            // A token whose operation finished inline and is about to pop again looks itself.
            q.core.tokens = 1
            q.core.tokensInOperations = 1
            XCTAssertEqual(q.planTokensLocked(qos: .default, callerWillLook: true).tokens, 0)
        }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.value, 100)
    }

    func testNoTokenWhileNothingMayStart() {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        for _ in 0..<10 { queue.addOperation {} }
        planning(queue) { q in
            // At the limit: the ready operations wait for a slot, not for a token.
            q.core.limit = 0
            XCTAssertEqual(q.planTokensLocked(qos: .default).tokens, 0)
            q.core.limit = TKOperationQueue.systemWidth
        }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(queue.operationCount, 0)
    }
}

/// A count bumped by operations on pool workers.
private final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
