// TKOperationQueue: chains and diamonds in a valid order, priorities order a serial queue, the
// concurrency limit holds (judged by a pthread-mutex meter), blocked operations are replaced (8
// one-second waits with a limit of 8 take about a second), cancellation before and during
// execution, barriers, asynchronous operations, completion blocks once, suspension, waits, the
// main queue, `current`, underlying queues. Completion is judged with Foundation's DispatchGroup
// where the queue's own wait is not what is tested.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

/// Waits `remaining` ThreadKit-blocking milliseconds (the pool sees the wait), then finishes from
/// that other thread.
private final class AsyncSleeper: TKOperation, @unchecked Sendable {
    let meter: ConcurrencyMeter
    init(_ meter: ConcurrencyMeter) { self.meter = meter }
    override var isAsynchronous: Bool { true }
    override func start() {
        meter.enter()
        TKDispatchQueue.global().async { [self] in
            TKThread.sleep(for: .milliseconds(5))
            meter.leave()
            finish()
        }
    }
}

final class OperationQueueTests: XCTestCase {
    /// A block operation that logs its name when it runs.
    private func logged(_ name: String, _ log: EventLog, priority: TKOperation.QueuePriority = .normal) -> TKBlockOperation {
        let op = TKBlockOperation { log.append(name) }
        op.name = name
        op.queuePriority = priority
        return op
    }

    func testAChainRunsInOrderOnAConcurrentQueue() throws {
        let queue = TKOperationQueue()
        let log = EventLog()
        let ops = (0..<200).map { logged("\($0)", log) }
        for i in 1..<ops.count { try ops[i].addDependency(ops[i - 1]) }
        queue.addOperations(ops.reversed(), waitUntilFinished: true)
        XCTAssertEqual(log.all, (0..<200).map { "\($0)" })
        XCTAssertTrue(ops.allSatisfy(\.isFinished))
        queue.waitUntilAllOperationsAreFinished() // the queue's own books may trail the operations' finish
        XCTAssertEqual(queue.operationCount, 0)
    }

    func testDiamondsRunInAValidOrder() throws {
        let queue = TKOperationQueue()
        for _ in 0..<stress(300) {
            let log = EventLog()
            let top = logged("top", log)
            let left = logged("left", log)
            let right = logged("right", log)
            let bottom = logged("bottom", log)
            try left.addDependency(top)
            try right.addDependency(top)
            try bottom.addDependency(left)
            try bottom.addDependency(right)
            queue.addOperations([bottom, right, left, top], waitUntilFinished: true)
            let events = log.all
            XCTAssertEqual(events.count, 4)
            XCTAssertEqual(events.first, "top")
            XCTAssertEqual(events.last, "bottom")
        }
    }

    func testPrioritiesOrderASerialQueueThenFIFO() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = true
        let log = EventLog()
        let plan: [(String, TKOperation.QueuePriority)] = [
            ("low1", .low), ("vh1", .veryHigh), ("n1", .normal), ("h1", .high), ("vl1", .veryLow),
            ("n2", .normal), ("h2", .high), ("vh2", .veryHigh), ("low2", .low), ("n3", .normal),
        ]
        let ops = plan.map { logged($0.0, log, priority: $0.1) }
        queue.addOperations(ops, waitUntilFinished: false)
        XCTAssertEqual(queue.operationCount, 10)
        XCTAssertEqual(log.all, [], "a suspended queue starts nothing")
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["vh1", "vh2", "h1", "h2", "n1", "n2", "n3", "low1", "low2", "vl1"])
    }

    func testASerialQueueRunsOneAtATimeInTheOrderAdded() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 1
        let meter = ConcurrencyMeter()
        let log = EventLog()
        let n = stress(2_000)
        for i in 0..<n {
            queue.addOperation {
                meter.enter()
                log.append("\(i)")
                meter.leave()
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(meter.peak, 1)
        XCTAssertEqual(log.all, (0..<n).map { "\($0)" })
    }

    func testTheConcurrencyLimitIsNeverExceededEvenWhenOperationsBlock() {
        for limit in [2, 3, 5] {
            let queue = TKOperationQueue()
            queue.maxConcurrentOperationCount = limit
            let meter = ConcurrencyMeter()
            let done = DispatchGroup()
            // Until `limit` operations have run at once, each stays inside (parked in 1 ms sleeps,
            // so the pool would happily run more), up to a generous deadline shared by all: how
            // soon the slots fill depends on the machine's load, whether they fill does not.
            let deadline = ContinuousClock.now + .seconds(30)
            for _ in 0..<60 {
                done.enter()
                queue.addOperation {
                    meter.enter()
                    while meter.peak < limit && ContinuousClock.now < deadline {
                        TKThread.sleep(for: .milliseconds(1))
                    }
                    TKThread.sleep(for: .milliseconds(2)) // parks: the pool would happily run more
                    meter.leave()
                    done.leave()
                }
            }
            XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
            XCTAssertLessThanOrEqual(meter.peak, limit)
            XCTAssertEqual(meter.peak, limit, "the queue never used its \(limit) slots (peak \(meter.peak))")
        }
    }

    func testEightOperationsBlockingOneSecondWithLimitEightFinishTogether() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 8
        let never = TKDispatchSemaphore(value: 0)
        let start = ContinuousClock.now
        for _ in 0..<8 {
            queue.addOperation { _ = never.wait(until: .now + .seconds(1)) }
        }
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = ContinuousClock.now - start
        XCTAssertGreaterThanOrEqual(elapsed, .seconds(1), "a one-second wait returned early")
        XCTAssertLessThan(elapsed, .seconds(4), "8 blocked operations took \(elapsed): they did not run together")
    }

    func testCancelBeforeExecutionSkipsMainButFinishesAndCompletes() {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        let log = EventLog()
        let completions = JudgedCounter()
        let ops = (0..<10).map { i -> TKBlockOperation in
            let op = logged("\(i)", log)
            op.completionBlock = { completions.add() }
            return op
        }
        queue.addOperations(ops, waitUntilFinished: false)
        for i in stride(from: 0, to: 10, by: 2) { ops[i].cancel() }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(Set(log.all), Set(["1", "3", "5", "7", "9"]))
        XCTAssertTrue(ops.allSatisfy(\.isFinished))
        XCTAssertEqual(completions.count, 10, "every operation, cancelled or not, completes once")
    }

    func testCancelDuringExecutionIsSeenByMainAndDependentsWaitForTheEnd() throws {
        let queue = TKOperationQueue()
        let log = EventLog()
        let started = TKDispatchSemaphore(value: 0)
        final class Loop: TKOperation, @unchecked Sendable {
            let started: TKDispatchSemaphore, log: EventLog
            init(_ started: TKDispatchSemaphore, _ log: EventLog) {
                self.started = started
                self.log = log
            }
            override func main() {
                started.signal()
                let deadline = ContinuousClock.now + .seconds(30)
                while !isCancelled && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(1)) }
                log.append("loop saw cancel: \(isCancelled)")
            }
        }
        let loop = Loop(started, log)
        let after = logged("after", log)
        try after.addDependency(loop)
        queue.addOperations([loop, after], waitUntilFinished: false)
        XCTAssertEqual(started.wait(until: .now + .seconds(30)), .success)
        loop.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["loop saw cancel: true", "after"])
        XCTAssertTrue(loop.isCancelled && loop.isFinished)
    }

    func testCancelAllOperationsStopsEverythingNotStarted() {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        let ran = JudgedCounter()
        for _ in 0..<500 { queue.addOperation { ran.add() } }
        queue.addBarrierBlock { ran.add() }
        XCTAssertEqual(queue.operationCount, 501)
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.count, 0)
        XCTAssertEqual(queue.operationCount, 0)
    }

    func testABarrierRunsAfterEverythingBeforeAndBeforeEverythingAfter() {
        for limit in [1, 3, TKOperationQueue.defaultMaxConcurrentOperationCount] {
            let queue = TKOperationQueue()
            queue.maxConcurrentOperationCount = limit
            let before = JudgedCounter()
            let after = JudgedCounter()
            let seenByBarrier = Shared<[Int]>([]) // written by barriers, read after the queue drained
            for _ in 0..<5 {
                for _ in 0..<40 {
                    queue.addOperation {
                        TKThread.sleep(for: .microseconds(200))
                        before.add()
                    }
                }
                queue.addBarrierBlock {
                    seenByBarrier.value.append(before.count)
                    seenByBarrier.value.append(after.count)
                }
                for _ in 0..<40 { queue.addOperation { after.add() } }
            }
            queue.waitUntilAllOperationsAreFinished()
            // Barrier k saw 40(k+1) "before" operations done and 40k "after" ones (the previous
            // rounds' "after" operations come before barrier k in the queue).
            var expected: [Int] = []
            for k in 0..<5 { expected += [40 * (k + 1), 40 * k] }
            XCTAssertEqual(seenByBarrier.value, expected, "limit \(limit)")
        }
    }

    func testABarrierOnAnEmptyQueueRunsAtOnce() {
        let queue = TKOperationQueue()
        let ran = Flag()
        queue.addBarrierBlock { ran.set() }
        XCTAssertTrue(ran.wait())
    }

    func testAsynchronousOperationsCountAgainstTheLimitUntilTheyFinish() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 2
        let meter = ConcurrencyMeter()
        let ops = (0..<30).map { _ in AsyncSleeper(meter) }
        queue.addOperations(ops, waitUntilFinished: true)
        XCTAssertTrue(ops.allSatisfy(\.isFinished))
        XCTAssertEqual(meter.peak, 2)
    }

    func testCompletionBlocksRunOnceEach() {
        let queue = TKOperationQueue()
        let counts = (0..<1_000).map { _ in JudgedCounter() }
        let ops = counts.map { counter -> TKBlockOperation in
            let op = TKBlockOperation {}
            op.completionBlock = { counter.add() }
            return op
        }
        for op in ops.prefix(100) { op.cancel() }
        queue.addOperations(ops, waitUntilFinished: true)
        XCTAssertTrue(counts.allSatisfy { $0.count == 1 })
    }

    func testOperationCountAndWaitUntilAllOperationsAreFinished() {
        let queue = TKOperationQueue()
        XCTAssertEqual(queue.operationCount, 0)
        queue.waitUntilAllOperationsAreFinished() // empty: returns at once
        let release = TKDispatchSemaphore(value: 0)
        for _ in 0..<3 { queue.addOperation { _ = release.wait(until: .now + .seconds(30)) } }
        XCTAssertEqual(queue.operationCount, 3)
        let waited = Workers.start { queue.waitUntilAllOperationsAreFinished() }
        XCTAssertEqual(waited.wait(timeout: .now() + 0.05), .timedOut)
        for _ in 0..<3 { release.signal() }
        XCTAssertEqual(waited.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(queue.operationCount, 0)
    }

    func testDependenciesAcrossQueues() throws {
        let a = TKOperationQueue()
        let b = TKOperationQueue()
        b.maxConcurrentOperationCount = 1
        let log = EventLog()
        let download = logged("download", log)
        let decode = logged("decode", log)
        let show = logged("show", log)
        try decode.addDependency(download)
        try show.addDependency(decode)
        b.addOperation(show)
        a.addOperation(decode)
        b.addOperation(download)
        show.waitUntilFinished()
        XCTAssertEqual(log.all, ["download", "decode", "show"])
    }

    func testSuspensionHoldsStartsButNotAdds() {
        let queue = TKOperationQueue()
        queue.isSuspended = true
        XCTAssertTrue(queue.isSuspended)
        let ran = JudgedCounter()
        let done = DispatchGroup()
        for _ in 0..<10 {
            done.enter()
            queue.addOperation {
                ran.add()
                done.leave()
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 0.05), .timedOut)
        XCTAssertEqual(ran.count, 0)
        queue.isSuspended = false
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(ran.count, 10)
    }

    func testCurrentIsTheRunningQueueMainOnTheMainThreadAndNilElsewhere() {
        let queue = TKOperationQueue()
        queue.name = "current-test"
        // XCTest runs this on the main thread: outside any operation, NSOperationQueue's
        // currentQueue there is the main queue.
        XCTAssertTrue(Thread.isMainThread)
        XCTAssertTrue(TKOperationQueue.current === TKOperationQueue.main)
        let seen = Shared<String?>(nil) // written by the operation, read after it finished
        let op = TKBlockOperation { seen.value = TKOperationQueue.current?.name }
        queue.addOperation(op)
        op.waitUntilFinished()
        XCTAssertEqual(seen.value, "current-test")
        XCTAssertTrue(TKOperationQueue.current === TKOperationQueue.main)
        // On a secondary thread outside operations there is none (judged with Foundation's Thread).
        let onThread = Shared<Bool?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            onThread.value = TKOperationQueue.current == nil
            done.signal()
        }.start()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(onThread.value, true)
    }

    func testAQueueDroppedWhileItsFinishedOperationsAreHeldIsFreed() {
        // Foundation lets go of an operation's queue when it finishes: held finished operations
        // do not keep their queue alive, and a queue nobody holds lives until its work is done.
        var kept: [TKOperation] = []
        let alive = Freed.alive { freed in
            let queue = TKOperationQueue()
            freed.watch("queue", queue)
            let release = DispatchSemaphore(value: 0)
            let blocked = TKBlockOperation { release.wait() }
            let quick = TKBlockOperation {}
            let dependent = TKBlockOperation {}
            try? dependent.addDependency(blocked)
            queue.addOperations([blocked, quick, dependent], waitUntilFinished: false)
            kept = [blocked, quick, dependent]
            release.signal()
        }
        XCTAssertEqual(alive, [], "a finished operation kept its queue alive")
        XCTAssertTrue(kept.allSatisfy(\.isFinished), "the queue ran everything before it went")
    }

    func testTheMainQueueRunsOperationsOnTheMainThread() {
        let onMain = Shared<Bool?>(nil)
        let current = Shared<Bool?>(nil) // written on the main thread
        let finished = Flag()
        TKDispatchQueue.global().async {
            TKOperationQueue.main.addOperation {
                onMain.value = TKThread.isMainThread
                current.value = TKOperationQueue.current === TKOperationQueue.main
                finished.set()
            }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !finished.isSet && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(50))
        }
        XCTAssertEqual(onMain.value, true)
        XCTAssertEqual(current.value, true)
        XCTAssertEqual(TKOperationQueue.main.maxConcurrentOperationCount, 1)
        XCTAssertTrue(TKOperationQueue.main.underlyingQueue === TKDispatchQueue.main)
    }

    func testAnUnderlyingQueueRunsTheOperations() {
        let key = TKDispatchSpecificKey<String>()
        let underlying = TKDispatchQueue(label: "underlying")
        underlying.setSpecific(key: key, value: "underlying")
        let queue = TKOperationQueue()
        queue.underlyingQueue = underlying
        XCTAssertTrue(queue.underlyingQueue === underlying)
        let seen = EventLog()
        for _ in 0..<20 { queue.addOperation { seen.append(TKDispatchQueue.getSpecific(key: key) ?? "none") } }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(seen.all, Array(repeating: "underlying", count: 20))
        // Changed once drained: later operations run on the new one (a token of the old one that is
        // still alive moves over instead of running them).
        let other = TKDispatchQueue(label: "other")
        other.setSpecific(key: key, value: "other")
        queue.underlyingQueue = other
        for _ in 0..<20 { queue.addOperation { seen.append(TKDispatchQueue.getSpecific(key: key) ?? "none") } }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(Array(seen.all.dropFirst(20)), Array(repeating: "other", count: 20))
    }

    func testQualityOfServiceChoosesThePoolTierThatRunsTheOperation() {
        // Background work runs on the pool's background tier (its own threads, a lower OS class);
        // an operation's own QoS overrides its queue's.
        let queue = TKOperationQueue()
        queue.qualityOfService = .background
        let threads = EventLog()
        let background = TKBlockOperation { threads.append(TKThread.current.name ?? "?") }
        queue.addOperation(background)
        background.waitUntilFinished()
        let interactive = TKBlockOperation { threads.append(TKThread.current.name ?? "?") }
        interactive.qualityOfService = .userInteractive
        queue.addOperation(interactive)
        interactive.waitUntilFinished()
        let names = threads.all
        XCTAssertEqual(names.count, 2)
        XCTAssertTrue(names[0].hasPrefix("tk.dispatch.bg."), "background operation ran on \(names[0])")
        XCTAssertTrue(
            names[1].hasPrefix("tk.dispatch.") && !names[1].hasPrefix("tk.dispatch.bg."),
            "interactive operation ran on \(names[1])")
    }

    func testSettingsReadBack() {
        let queue = TKOperationQueue()
        XCTAssertEqual(TKOperationQueue.defaultMaxConcurrentOperationCount, -1)
        XCTAssertEqual(queue.maxConcurrentOperationCount, -1)
        XCTAssertEqual(queue.qualityOfService, .default)
        XCTAssertNil(queue.name)
        XCTAssertNil(queue.underlyingQueue)
        XCTAssertFalse(queue.isSuspended)
        queue.name = "q"
        queue.maxConcurrentOperationCount = 4
        queue.qualityOfService = .utility
        XCTAssertEqual(queue.name, "q")
        XCTAssertEqual(queue.maxConcurrentOperationCount, 4)
        XCTAssertEqual(queue.qualityOfService, .utility)
    }

    func testRaisingTheLimitStartsWaitingOperations() {
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 0
        let done = DispatchGroup()
        for _ in 0..<5 {
            done.enter()
            queue.addOperation { done.leave() }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 0.05), .timedOut, "a limit of 0 starts nothing")
        queue.maxConcurrentOperationCount = 2
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }
}
