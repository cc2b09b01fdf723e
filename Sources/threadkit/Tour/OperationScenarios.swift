// OperationScenarios: the seeds' operation-queue chapter (the Concurrency Programming Guide's
// "Operation Queues": dependencies, priorities, completion blocks, cancellation) as a photo
// pipeline — download → decode → thumbnail per photo, one branch cancelled, an album published by
// a barrier — printed as it runs; then what ThreadKit adds: a dependency cycle refused with the
// whole cycle named (Foundation on Linux hangs), a stream of empty operations that leaves the
// pool's lock alone, and eight blocking operations replaced at once.
import ChildProcessRoles
import Synchronization
@_spi(Benchmarks) import ThreadKit

enum OperationScenarios {
    static let all: [Scenario] = [photoPipeline, cycleRefused, operationStream, blockingOperations]

    static let photoPipeline = Scenario(
        name: "operation-graph", title: "download → decode → thumbnail for three photos, one branch cancelled, then a barrier",
        source: "Concurrency Programming Guide, Operation Queues: dependencies, completion blocks, cancellation, priorities"
    ) { say in
        let queue = TKOperationQueue()
        queue.name = "photos"
        queue.maxConcurrentOperationCount = 2
        queue.isSuspended = true // build the whole graph first, then let it run
        let lock = TKLock()
        let order = SharedBox<[String]>([]) // guarded by `lock`
        let start = ContinuousClock.now
        @Sendable func stamp() -> String { "\(Int((ContinuousClock.now - start) / .milliseconds(1))) ms" }
        /// A step; one whose `input` was cancelled has nothing to work on and says so.
        @Sendable func step(_ name: String, _ ms: Int, input: TKOperation? = nil) -> TKBlockOperation {
            let op = TKBlockOperation {
                if let input, input.isCancelled {
                    say.say("\(stamp()): \(name): its input \"\(input.name ?? "?")\" was cancelled, nothing to do")
                    lock.withLock { order.value.append("\(name) (skipped)") }
                    return
                }
                say.say("\(stamp()): \(name) runs on \(TKOperationQueue.current?.name ?? "?")")
                TKThread.sleep(for: .milliseconds(ms))
                lock.withLock { order.value.append(name) }
            }
            op.name = name
            op.completionBlock = { say.say("\(stamp()): \(name) finished\(op.isCancelled ? " (cancelled: its work never ran)" : "")") }
            return op
        }
        var all: [TKBlockOperation] = []
        for photo in ["a.jpg", "b.jpg", "c.jpg"] {
            let download = step("download \(photo)", 30)
            let decode = step("decode \(photo)", 20, input: download)
            let thumb = step("thumbnail \(photo)", 10, input: decode)
            try decode.addDependency(download)
            try thumb.addDependency(decode)
            if photo == "a.jpg" { thumb.queuePriority = .high }
            all += [thumb, decode, download] // added in reverse: dependencies, not order, decide
        }
        let cancelled = all.first { $0.name == "decode b.jpg" }!
        queue.addOperations(all, waitUntilFinished: false)
        queue.addBarrierBlock {
            let done = lock.withLock { order.value.count }
            say.say("\(stamp()): barrier: album published with \(done) finished steps; nothing added later has started")
        }
        let late = step("share album", 1)
        queue.addOperation(late)
        say.say(
            "graph built: 9 steps + a barrier + 1 later step (\(queue.operationCount) operations); cancelling \"decode b.jpg\" before it starts"
        )
        cancelled.cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let ran = lock.withLock { order.value }
        say.say("ran in this order: \(ran.joined(separator: ", "))")
        func position(_ name: String) -> Int { ran.firstIndex(of: name) ?? -1 }
        for photo in ["a.jpg", "c.jpg"] {
            try say.check(
                position("download \(photo)") < position("decode \(photo)")
                    && position("decode \(photo)") < position("thumbnail \(photo)"), "\(photo) ran out of order")
        }
        try say.check(!ran.contains("decode b.jpg"), "a cancelled step ran")
        try say.check(
            ran.contains("thumbnail b.jpg (skipped)"), "a step whose dependency was cancelled never ran (cancelled counts as finished)")
        try say.check(ran.last == "share album", "the step added after the barrier ran before it")
        return "every step after its dependencies; the cancelled one finished without running; the barrier came after all nine"
    }

    static let cycleRefused = Scenario(
        name: "operation-cycle", title: "a dependency cycle is refused with the whole cycle named",
        source: "ThreadKit: Foundation's OperationQueue on Linux hangs forever on a cycle"
    ) { say in
        let upload = TKBlockOperation {}
        let resize = TKBlockOperation {}
        let tag = TKBlockOperation {}
        upload.name = "upload"
        resize.name = "resize"
        tag.name = "tag"
        try upload.addDependency(resize)
        try resize.addDependency(tag)
        say.say("upload waits for resize, resize waits for tag; now: tag.addDependency(upload)")
        do {
            try tag.addDependency(upload)
            throw ScenarioFailure("the cycle was accepted")
        } catch let error as TKError {
            say.say("refused: \(error)")
            try say.check(error.code == .dependencyCycle, "wrong error code \(error.code)")
        }
        let queue = TKOperationQueue()
        queue.addOperations([upload, resize, tag], waitUntilFinished: true)
        say.say("the graph without the cycle ran: \(upload.isFinished && resize.isFinished && tag.isFinished)")
        return "TKError(.dependencyCycle) instead of a hang; the rest of the graph still runs"
    }

    static let operationStream = Scenario(
        name: "operation-stream", title: "100,000 empty operations from one thread run on one token",
        source: "ThreadKit: short operations keep one token looking, which the pool runs without its lock"
    ) { say in
        let queue = TKOperationQueue()
        let ran = Atomic<Int>(0)
        let total = 100_000
        let before = TKPoolIntrospection.poolLockAcquisitions
        let start = ContinuousClock.now
        for _ in 0..<total { queue.addOperation { ran.wrappingAdd(1, ordering: .relaxed) } }
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = ContinuousClock.now - start
        let locks = TKPoolIntrospection.poolLockAcquisitions - before
        say.say(
            "\(ran.load(ordering: .relaxed)) of \(total) operations ran in \(elapsed); the pool's lock was taken "
                + "\(locks) times (\(locks * 1_000 / total) per 1,000 operations; a token per gap in the stream "
                + "would take it a couple of hundred times per 1,000)")
        try say.check(ran.load(ordering: .relaxed) == total, "operations were lost")
        return "a stream of short operations costs the pool almost nothing"
    }

    static let blockingOperations = Scenario(
        name: "operation-blocking", title: "8 operations that each block 1 s, max concurrency 8, finish in about 1 s",
        source: "ThreadKit: waits park through the pool, which replaces a blocked worker at once (Foundation on Linux: about 8 s)"
    ) { say in
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 8
        let never = TKDispatchSemaphore(value: 0)
        let running = Atomic<Int>(0)
        let peak = Atomic<Int>(0)
        let start = ContinuousClock.now
        for _ in 0..<8 {
            queue.addOperation {
                let now = running.wrappingAdd(1, ordering: .relaxed).newValue
                var seen = peak.load(ordering: .relaxed)
                while now > seen {
                    let (exchanged, original) = peak.compareExchange(expected: seen, desired: now, ordering: .relaxed)
                    if exchanged { break }
                    seen = original
                }
                _ = never.wait(until: .now + .seconds(1))
                running.wrappingSubtract(1, ordering: .relaxed)
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = ContinuousClock.now - start
        say.say("all 8 finished after \(elapsed); at most \(peak.load(ordering: .relaxed)) were blocked at once")
        try say.check(elapsed >= .seconds(1), "a 1 s wait ended early")
        try say.check(elapsed < .milliseconds(1_500), "took \(elapsed), more than 1.5× the ideal 1 s")
        return "eight blocked operations ran side by side on a 2-core machine"
    }
}
