// OperationBenchmarks: TKOperationQueue against Foundation's OperationQueue, in one process,
// interleaved (issue 7's rows):
//   - 100,000 empty block operations on a queue with max concurrency 2 (throughput: time per
//     operation from the first add until waitUntilAllOperationsAreFinished returns);
//   - a 10,000-long dependency chain (time per operation: each created, made to depend on the
//     previous one and added as it is made, then all waited for). Built whole before adding,
//     Foundation's chain is quadratic here (about 0.7 ms per operation); ours is the same either way.
// Then a table that is not a time per operation: 8 operations that each block 1 s in a semaphore
// wait, with max concurrency 8 (wall time; the ideal is 1 s).
import Foundation
import ThreadKit

enum OperationBenchmarks {
    static func rows() -> [Row] {
        [throughput(), chain()]
    }

    static func throughput() -> Row {
        Row(
            group: "operations", name: "block operations, max concurrency 2 (per operation)", operations: 100_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKOperationQueue") { n in
                    let q = TKOperationQueue()
                    q.maxConcurrentOperationCount = 2
                    return timed {
                        for _ in 0..<n { q.addOperation {} }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
                Contender(name: "OperationQueue") { n in
                    let q = OperationQueue()
                    q.maxConcurrentOperationCount = 2
                    return timed {
                        for _ in 0..<n { q.addOperation {} }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
            ], reference: "OperationQueue", target: "≤ 0.33× (3× throughput)")
    }

    static func chain() -> Row {
        Row(
            group: "operations", name: "dependency chain of 10,000 (per operation)", operations: 10_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKOperationQueue") { n in
                    let q = TKOperationQueue()
                    return timed {
                        var previous: TKOperation?
                        for _ in 0..<n {
                            let op = TKBlockOperation {}
                            if let previous { try! op.addDependency(previous) }
                            q.addOperation(op)
                            previous = op
                        }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
                Contender(name: "OperationQueue") { n in
                    let q = OperationQueue()
                    return timed {
                        var previous: Operation?
                        for _ in 0..<n {
                            let op = BlockOperation {}
                            if let previous { op.addDependency(previous) }
                            q.addOperation(op)
                            previous = op
                        }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
            ], reference: "OperationQueue", target: "≤ 0.33× (3× throughput)")
    }

    /// 8 operations that each wait 1 s, max concurrency 8: the wall time of each side.
    static func blocking() {
        print("| row | contender | result | target |")
        print("|---|---|---|---|")
        let tk = wallTime {
            let q = TKOperationQueue()
            q.maxConcurrentOperationCount = 8
            let s = TKDispatchSemaphore(value: 0)
            for _ in 0..<8 { q.addOperation { _ = s.wait(until: .now + .seconds(1)) } }
            q.waitUntilAllOperationsAreFinished()
        }
        let foundation = wallTime {
            let q = OperationQueue()
            q.maxConcurrentOperationCount = 8
            let s = DispatchSemaphore(value: 0)
            for _ in 0..<8 { q.addOperation { _ = s.wait(timeout: .now() + 1) } }
            q.waitUntilAllOperationsAreFinished()
        }
        print(
            String(
                format:
                    "| 8 operations blocking 1 s each, max concurrency 8 (wall time) | TKOperationQueue | %.2f s (%.2f× the ideal 1 s) | < 1.5× the ideal |",
                tk, tk))
        print(String(format: "| | OperationQueue | %.2f s | |", foundation))
        print("")
    }

    private static func wallTime(_ body: () -> Void) -> Double {
        let start = now()
        body()
        return Double(now() - start) / 1e9
    }
}
