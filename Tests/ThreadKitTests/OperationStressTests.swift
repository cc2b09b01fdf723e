// 1,000 seeded random dependency graphs (RELIABILITY.md, plan item 7): each runs on one or two
// queues with a random concurrency limit, random priorities, added in random order. Judged by a
// pthread-mutex log: every operation starts after all its dependencies finished, runs once, and
// no queue ever runs more than its limit at once. The seed is printed; TK_SEED=n replays a run.
import Foundation
import ThreadKit
import XCTest

final class OperationStressTests: XCTestCase {
    /// Per operation: start and end positions in the global event sequence, and a run count.
    private final class Judge: @unchecked Sendable {
        private var mutex = pthread_mutex_t()
        private var clock = 0
        var started: [Int], ended: [Int], runs: [Int] // guarded by mutex
        init(_ n: Int) {
            started = Array(repeating: -1, count: n)
            ended = Array(repeating: -1, count: n)
            runs = Array(repeating: 0, count: n)
            pthread_mutex_init(&mutex, nil)
        }
        deinit { pthread_mutex_destroy(&mutex) }
        func start(_ i: Int) {
            pthread_mutex_lock(&mutex)
            clock += 1
            started[i] = clock
            runs[i] += 1
            pthread_mutex_unlock(&mutex)
        }
        func end(_ i: Int) {
            pthread_mutex_lock(&mutex)
            clock += 1
            ended[i] = clock
            pthread_mutex_unlock(&mutex)
        }
    }

    func testRandomDependencyGraphsRunInATopologicalOrderWithinTheLimit() throws {
        let seed =
            ProcessInfo.processInfo.environment["TK_SEED"].flatMap(UInt64.init)
            ?? UInt64.random(in: 0...UInt64.max)
        print("OperationStressTests: random graphs with seed \(seed) (replay with TK_SEED=\(seed))")
        var rng = SeededGenerator(seed: seed)
        let graphs = stress(1_000)
        for g in 0..<graphs {
            let n = Int.random(in: 2...40, using: &rng)
            let density = Double.random(in: 0.02...0.3, using: &rng)
            let limits = [1, 2, 3, 4, TKOperationQueue.defaultMaxConcurrentOperationCount]
            let queueCount = Int.random(in: 1...2, using: &rng)
            let queues = (0..<queueCount).map { _ -> TKOperationQueue in
                let q = TKOperationQueue()
                q.maxConcurrentOperationCount = limits.randomElement(using: &rng)!
                return q
            }
            let meters = queues.map { _ in ConcurrencyMeter() }
            let judge = Judge(n)
            let home = (0..<n).map { _ in Int.random(in: 0..<queueCount, using: &rng) }
            let ops = (0..<n).map { i -> TKBlockOperation in
                let meter = meters[home[i]]
                let op = TKBlockOperation {
                    meter.enter()
                    judge.start(i)
                    if i % 3 == 0 { sched_yield() }
                    judge.end(i)
                    meter.leave()
                }
                op.queuePriority = [.veryLow, .low, .normal, .high, .veryHigh].randomElement(using: &rng)!
                return op
            }
            var edges: [(Int, Int)] = [] // (dependent, dependency): dependency < dependent, so acyclic
            for i in 1..<n {
                for j in 0..<i where Double.random(in: 0..<1, using: &rng) < density {
                    try ops[i].addDependency(ops[j])
                    edges.append((i, j))
                }
            }
            let order = (0..<n).shuffled(using: &rng)
            for i in order { queues[home[i]].addOperation(ops[i]) }
            let deadline = ContinuousClock.now + .seconds(60)
            for op in ops { XCTAssertTrue(waitUntil(deadline) { op.isFinished }, "graph \(g) (seed \(seed)) hung") }
            for q in queues { q.waitUntilAllOperationsAreFinished() }
            XCTAssertEqual(judge.runs, Array(repeating: 1, count: n), "graph \(g) (seed \(seed)): an operation ran twice or never")
            for (i, j) in edges where judge.started[i] < judge.ended[j] {
                XCTFail("graph \(g) (seed \(seed)): operation \(i) started before its dependency \(j) finished")
            }
            for (q, meter) in zip(queues, meters) {
                let limit = q.maxConcurrentOperationCount
                if limit > 0 { XCTAssertLessThanOrEqual(meter.peak, limit, "graph \(g) (seed \(seed)): limit \(limit) exceeded") }
            }
        }
    }

    func testRandomCancellationsNeverRunMainAndNeverBlockDependents() throws {
        var rng = SeededGenerator(seed: 0x0C0FFEE)
        for _ in 0..<stress(200) {
            let queue = TKOperationQueue()
            queue.isSuspended = true
            let n = Int.random(in: 2...30, using: &rng)
            let judge = Judge(n)
            let ops = (0..<n).map { i in
                TKBlockOperation {
                    judge.start(i)
                    judge.end(i)
                }
            }
            for i in 1..<n {
                for j in 0..<i where Bool.random(using: &rng) && Bool.random(using: &rng) { try ops[i].addDependency(ops[j]) }
            }
            queue.addOperations(ops, waitUntilFinished: false)
            let cancelled = Set((0..<n).filter { _ in Int.random(in: 0..<4, using: &rng) == 0 })
            for i in cancelled { ops[i].cancel() }
            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
            for i in 0..<n {
                XCTAssertTrue(ops[i].isFinished)
                XCTAssertEqual(judge.runs[i], cancelled.contains(i) ? 0 : 1, "operation \(i)")
            }
        }
    }
}
