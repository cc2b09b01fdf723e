// TKOperationQueue's token plan (docs/Operations.md, "Tokens"), decided under the queue's lock
// and tested here without running a token: a queue keeps at most one token looking, whatever the
// number of ready operations; a token inside an operation does not look; a caller about to pop
// again counts as looking. The hand-off that fans tokens out is driven by OperationQueueTests
// (blocked operations with a limit of 8 finish together; a limit is reached and never exceeded).
// Short operations: the hand-off is a continuation even with nothing ready, and a token lingers
// only as the one looker of a pool queue whose worker is free; a continuation behind an operation
// that blocks, or spins, still runs the next operation (judged by that operation's own signal).
import Synchronization
import XCTest

@testable import ThreadKit

final class OperationTokenTests: XCTestCase {
    /// Runs `body` under the queue's lock with the queue seen as resumed, then restores the books
    /// (`suspended`, the token counts) so that nothing planned here is ever submitted.
    private func planning(_ queue: TKOperationQueue, _ body: (TKOperationQueue) -> Void) {
        queue.lock.lock()
        let saved = (queue.core.tokens, queue.core.tokensInOperations, queue.core.executing, queue.core.limit)
        let short = queue.core.shortOperations
        queue.core.suspended = false
        body(queue)
        (queue.core.tokens, queue.core.tokensInOperations, queue.core.executing, queue.core.limit) = saved
        queue.core.shortOperations = short
        queue.core.suspended = true
        queue.lock.unlock()
    }

    /// A new queue, suspended: what is added stays ready and plans no token.
    private func suspendedQueue() -> TKOperationQueue {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        return queue
    }

    /// Resumes `queue` and waits until every operation it holds has finished.
    private func resumeAndWait(_ queue: TKOperationQueue) {
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }

    func testManyReadyOperationsGetOneLookingTokenNotOneEach() {
        let queue = suspendedQueue()
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
        resumeAndWait(queue)
        XCTAssertEqual(ran.value, 100)
    }

    func testNoTokenWhileNothingMayStart() {
        let queue = suspendedQueue()
        for _ in 0..<10 { queue.addOperation {} }
        planning(queue) { q in
            // At the limit: the ready operations wait for a slot, not for a token.
            q.core.limit = 0
            XCTAssertEqual(q.planTokensLocked(qos: .default).tokens, 0)
            q.core.limit = TKOperationQueue.systemWidth
        }
        resumeAndWait(queue)
        XCTAssertEqual(queue.operationCount, 0)
    }
}

extension OperationTokenTests {
    func testAfterShortOperationsTheHandOffIsAContinuationEvenWithNothingReady() {
        let queue = suspendedQueue()
        planning(queue) { q in
            XCTAssertTrue(q.core.ready.isEmpty)
            // A token has just popped an operation: it is inside it, and it counts executing.
            q.core.tokens = 1
            q.core.tokensInOperations = 1
            q.core.executing = 1
            q.core.shortOperations = false
            XCTAssertEqual(q.handOffLocked().tokens, 0, "nothing ready and no short operations: no hand-off")
            q.core.shortOperations = true
            let plan = q.handOffLocked()
            XCTAssertEqual(plan.tokens, 1, "after short operations the next looker goes out with nothing ready")
            XCTAssertTrue(plan.continuation, "the hand-off after short operations is not a continuation")
            XCTAssertEqual(q.handOffLocked().tokens, 0, "a second hand-off while the continuation looks")
            // A serial queue has nothing more to start.
            q.core.tokens = 1
            q.core.limit = 1
            XCTAssertEqual(q.handOffLocked().tokens, 0, "a serial queue handed off")
        }
        resumeAndWait(queue)
    }

    func testWithOperationsReadyTheHandOffOfLongOperationsIsShared() {
        let queue = suspendedQueue()
        for _ in 0..<3 { queue.addOperation {} }
        planning(queue) { q in
            q.core.tokens = 1
            q.core.tokensInOperations = 1
            q.core.executing = 1
            q.core.shortOperations = false
            let plan = q.handOffLocked()
            XCTAssertEqual(plan.tokens, 1, "ready operations and nobody looking: no hand-off")
            XCTAssertFalse(plan.continuation, "the hand-off of long operations waits behind the one that made it")
        }
        resumeAndWait(queue)
        XCTAssertEqual(queue.operationCount, 0)
    }

    func testATokenLingersOnlyAsTheOneLookerOfAPoolQueueWithNothingReady() {
        let queue = suspendedQueue()
        planning(queue) { q in
            q.core.tokens = 1
            q.core.tokensInOperations = 0
            XCTAssertTrue(q.mayLingerLocked(nil, workerIsFree: true))
            XCTAssertFalse(q.mayLingerLocked(nil, workerIsFree: false), "lingered while its worker had other work")
            XCTAssertFalse(q.mayLingerLocked(TKDispatchQueue.main, workerIsFree: true), "lingered on an underlying queue")
            q.core.tokens = 2
            XCTAssertFalse(q.mayLingerLocked(nil, workerIsFree: true), "lingered while another token looks")
            q.core.tokens = 1
            q.core.executing = q.core.limit
            XCTAssertFalse(q.mayLingerLocked(nil, workerIsFree: true), "lingered at the limit")
        }
        queue.addOperation {}
        planning(queue) { q in
            q.core.tokens = 1
            q.core.tokensInOperations = 0
            XCTAssertFalse(q.mayLingerLocked(nil, workerIsFree: true), "lingered with an operation ready")
        }
        resumeAndWait(queue)
    }

    /// X waits on a semaphore that Y, added after it, signals, with a limit of 2, on a queue whose
    /// operations ran short (set here, as a stream of empty operations leaves it): X's token hands
    /// off a continuation to its own local queue, and only the pool's hand-on of that
    /// continuation (X blocks in a ThreadKit wait) lets Y start.
    func testAfterShortOperationsAnOperationThatBlocksDoesNotHoldBackTheNext() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 2
        queue.isSuspended = true
        let signal = TKDispatchSemaphore(value: 0)
        let signalled = Atomic<Bool>(false)
        queue.addOperation { signalled.store(signal.wait(until: .now + .seconds(30)) == .success, ordering: .relaxed) }
        queue.addOperation { signal.signal() }
        queue.lock.withLock { queue.core.shortOperations = true }
        resumeAndWait(queue)
        XCTAssertTrue(signalled.load(ordering: .relaxed), "the operation behind a blocked one never started")
    }

    /// As above, but X spins (never blocks in a ThreadKit wait) until Y sets a flag: the monitor
    /// hands X's continuation on.
    func testAfterShortOperationsAnOperationThatSpinsDoesNotHoldBackTheNext() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 2
        queue.isSuspended = true
        let flag = Atomic<Bool>(false)
        let seen = Atomic<Bool>(false)
        queue.addOperation {
            let deadline = ContinuousClock.now + .seconds(30)
            while !flag.load(ordering: .acquiring) && ContinuousClock.now < deadline {}
            seen.store(flag.load(ordering: .acquiring), ordering: .relaxed)
        }
        queue.addOperation { flag.store(true, ordering: .releasing) }
        queue.lock.withLock { queue.core.shortOperations = true }
        resumeAndWait(queue)
        XCTAssertTrue(seen.load(ordering: .relaxed), "the operation behind a spinning one never started")
    }
}

/// A count bumped by operations on pool workers.
private final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
