// TKOperation and TKBlockOperation on their own (no queue): states and their transitions, start by
// hand, cancel before start, completion blocks once, asynchronous operations, dependencies and
// readiness, cycles refused (also when two threads race to close one), execution blocks run
// concurrently, waitUntilFinished from many threads.
import Foundation
import Synchronization
import ThreadKit
import XCTest

/// Records what its main() saw.
private final class Probe: TKOperation, @unchecked Sendable {
    let log: EventLog
    let label: String
    init(_ label: String, _ log: EventLog) {
        self.label = label
        self.log = log
        super.init()
        name = label
    }
    override func main() {
        log.append("\(label) main executing=\(isExecuting) finished=\(isFinished)")
    }
}

/// Finishes from another thread, after `release` is signalled. Started by hand, it calls
/// super.start() first, which marks it executing (a queue does that itself).
private final class Fetch: TKOperation, @unchecked Sendable {
    let release = TKDispatchSemaphore(value: 0)
    let log: EventLog
    let callsSuper: Bool
    init(_ log: EventLog, callsSuper: Bool = true) {
        self.log = log
        self.callsSuper = callsSuper
    }
    override var isAsynchronous: Bool { true }
    override func start() {
        if callsSuper { super.start() }
        log.append("start executing=\(isExecuting)")
        TKDispatchQueue.global().async { [self] in
            _ = release.wait(until: .now + .seconds(30))
            log.append("finish")
            finish()
        }
    }
}

final class OperationTests: XCTestCase {
    func testFinishedOperationsAreFreedWhenDropped() {
        let alive = Freed.alive { freed in
            let queue = TKOperationQueue()
            let first = TKBlockOperation {}
            let second = TKBlockOperation {}
            try? second.addDependency(first)
            second.completionBlock = { _ = second.isFinished } // a block that captures its operation
            freed.watch("first", first)
            freed.watch("second", second)
            freed.watch("queue", queue)
            queue.addOperations([first, second], waitUntilFinished: true)
            let byHand = TKBlockOperation {}
            byHand.start()
            freed.watch("started by hand", byHand)
        }
        XCTAssertEqual(alive, [])
    }

    func testASynchronousOperationGoesFromReadyToExecutingToFinished() {
        let log = EventLog()
        let op = Probe("a", log)
        XCTAssertTrue(op.isReady)
        XCTAssertFalse(op.isExecuting || op.isFinished || op.isCancelled)
        op.start()
        XCTAssertEqual(log.all, ["a main executing=true finished=false"])
        XCTAssertTrue(op.isFinished)
        XCTAssertFalse(op.isExecuting)
        op.waitUntilFinished() // finished: returns at once
    }

    func testCancelBeforeStartFinishesWithoutRunningMain() {
        let log = EventLog()
        let op = Probe("a", log)
        let completions = JudgedCounter()
        op.completionBlock = { completions.add() }
        op.cancel()
        XCTAssertTrue(op.isCancelled)
        XCTAssertTrue(op.isReady, "a cancelled operation is ready")
        XCTAssertFalse(op.isFinished)
        op.start()
        XCTAssertTrue(op.isFinished)
        XCTAssertEqual(log.all, [], "main ran although cancelled before start")
        XCTAssertEqual(completions.count, 1)
    }

    func testCancellingAFinishedOperationChangesNothing() {
        let op = TKBlockOperation {}
        op.start()
        op.cancel()
        XCTAssertTrue(op.isFinished)
        XCTAssertTrue(op.isCancelled, "the flag is set, as Foundation does")
    }

    func testTheCompletionBlockRunsOnceAfterFinishingAndIsCleared() {
        let op = TKBlockOperation {}
        let runs = JudgedCounter()
        let sawFinished = Shared(false) // written in the completion block, read after start() returns
        op.completionBlock = { [unowned op] in
            sawFinished.value = op.isFinished
            runs.add()
        }
        op.start()
        XCTAssertEqual(runs.count, 1)
        XCTAssertTrue(sawFinished.value)
        XCTAssertNil(op.completionBlock, "cleared once it has run, as Foundation does")
    }

    func testAnAsynchronousOperationStaysExecutingUntilItCallsFinish() {
        let log = EventLog()
        let op = Fetch(log)
        let completed = Flag()
        op.completionBlock = { completed.set() }
        op.start()
        XCTAssertTrue(op.isExecuting, "start() returned, the work goes on")
        XCTAssertFalse(op.isFinished)
        op.release.signal()
        op.waitUntilFinished()
        XCTAssertTrue(op.isFinished)
        XCTAssertFalse(op.isExecuting)
        XCTAssertTrue(completed.isSet, "waitUntilFinished returns after the completion block")
        XCTAssertEqual(log.all, ["start executing=true", "finish"])
    }

    func testAQueueMarksAnAsynchronousOperationExecutingBeforeItsStart() {
        let log = EventLog()
        let op = Fetch(log, callsSuper: false)
        let queue = TKOperationQueue()
        queue.addOperation(op)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { log.all.count == 1 })
        XCTAssertTrue(op.isExecuting)
        XCTAssertEqual(queue.operationCount, 1, "an asynchronous operation stays in its queue until it finishes")
        op.release.signal()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(op.isFinished)
        XCTAssertEqual(log.all, ["start executing=true", "finish"])
    }

    func testDependenciesDecideReadiness() throws {
        let a = TKBlockOperation {}
        let b = TKBlockOperation {}
        let c = TKBlockOperation {}
        try c.addDependency(a)
        try c.addDependency(b)
        try c.addDependency(a) // twice: no effect
        XCTAssertEqual(c.dependencies.count, 2)
        XCTAssertTrue(c.dependencies[0] === a && c.dependencies[1] === b)
        XCTAssertFalse(c.isReady)
        a.start()
        XCTAssertFalse(c.isReady)
        b.cancel()
        XCTAssertTrue(c.isReady, "a cancelled dependency counts as finished")
        let d = TKBlockOperation {}
        let e = TKBlockOperation {}
        try d.addDependency(e)
        XCTAssertFalse(d.isReady)
        d.removeDependency(e)
        XCTAssertTrue(d.isReady)
        XCTAssertTrue(d.dependencies.isEmpty)
        let f = TKBlockOperation {}
        try f.addDependency(a) // already finished
        XCTAssertTrue(f.isReady)
    }

    func testADependencyOnItselfIsRefused() {
        let a = TKBlockOperation {}
        a.name = "loop"
        XCTAssertThrowsError(try a.addDependency(a)) { error in
            let e = error as? TKError
            XCTAssertEqual(e?.code, .dependencyCycle)
            XCTAssertTrue(e?.message.contains("TKBlockOperation \"loop\"") ?? false, "\(error)")
            XCTAssertTrue(e?.message.contains("Fix:") ?? false)
        }
        XCTAssertTrue(a.dependencies.isEmpty)
        XCTAssertTrue(a.isReady)
    }

    func testACycleThroughOthersIsRefusedAndNamed() throws {
        let ops = (0..<4).map { i -> TKBlockOperation in
            let op = TKBlockOperation {}
            op.name = "op\(i)"
            return op
        }
        // op1 waits for op0, op2 for op1, op3 for op2.
        for i in 1..<4 { try ops[i].addDependency(ops[i - 1]) }
        XCTAssertThrowsError(try ops[0].addDependency(ops[3])) { error in
            let e = error as? TKError
            XCTAssertEqual(e?.code, .dependencyCycle)
            let message = e?.message ?? ""
            for i in 0..<4 { XCTAssertTrue(message.contains("\"op\(i)\""), "message lacks op\(i): \(message)") }
        }
        // Refused the other way round too: the backward search finds it.
        XCTAssertThrowsError(try ops[1].addDependency(ops[3]))
        XCTAssertTrue(ops[0].dependencies.isEmpty, "a refused dependency is not recorded")
        // Not a cycle: a second path to the same operation.
        try ops[3].addDependency(ops[0])
    }

    func testTwoThreadsRacingToCloseACycleCannotBothSucceed() {
        for _ in 0..<stress(500) {
            let a = TKBlockOperation {}
            let b = TKBlockOperation {}
            let refused = JudgedCounter()
            Workers.run(2) { i in
                do { if i == 0 { try a.addDependency(b) } else { try b.addDependency(a) } } catch { refused.add() }
            }
            XCTAssertEqual(refused.count, 1, "exactly one of a→b, b→a must be refused")
            XCTAssertEqual(a.dependencies.count + b.dependencies.count, 1)
        }
    }

    func testExecutionBlocksRunConcurrentlyAndTheOperationFinishesWhenAllDid() {
        // Each block waits (a ThreadKit wait) until all four are running at once.
        let running = TKDispatchGroup()
        for _ in 0..<4 { running.enter() }
        let met = JudgedCounter()
        let body: @Sendable () -> Void = {
            running.leave()
            if running.wait(until: .now + .seconds(20)) == .success { met.add() }
        }
        let op = TKBlockOperation(block: body)
        for _ in 0..<3 { op.addExecutionBlock(body) }
        op.start()
        XCTAssertTrue(op.isFinished)
        XCTAssertEqual(met.count, 4, "the four blocks did not all run at the same time")
    }

    func testWaitUntilFinishedReleasesEveryWaiter() {
        let release = TKDispatchSemaphore(value: 0)
        let op = TKBlockOperation { _ = release.wait(until: .now + .seconds(30)) }
        let returned = JudgedCounter()
        let waiters = (0..<4).map { _ in
            Workers.start {
                op.waitUntilFinished()
                if op.isFinished { returned.add() }
            }
        }
        let runner = Workers.start { op.start() }
        XCTAssertEqual(returned.count, 0)
        release.signal()
        XCTAssertEqual(runner.wait(timeout: .now() + 30), .success)
        for w in waiters { XCTAssertEqual(w.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(returned.count, 4)
    }

    func testPropertiesReadBackWhatWasSet() {
        let op = TKBlockOperation {}
        XCTAssertNil(op.name)
        XCTAssertEqual(op.queuePriority, .normal)
        XCTAssertEqual(op.qualityOfService, .default)
        XCTAssertFalse(op.isAsynchronous)
        op.name = "thumbnail"
        op.queuePriority = .veryHigh
        op.qualityOfService = .utility
        XCTAssertEqual(op.name, "thumbnail")
        XCTAssertEqual(op.queuePriority, .veryHigh)
        XCTAssertEqual(op.qualityOfService, .utility)
        XCTAssertEqual(TKOperation.QueuePriority.veryLow.rawValue, -8)
        XCTAssertEqual(TKOperation.QueuePriority.high.rawValue, 4)
    }
}
