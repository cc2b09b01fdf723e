// TKDispatchQueue+ConcurrentPerform: dispatch_apply (docs/DispatchPool.md, "concurrentPerform").
// The caller and up to cores-1 helper jobs claim chunks of iterations from one shared counter; the
// caller returns once every iteration has finished. Any thread may call it, workers included.
import Synchronization

extension TKDispatchQueue {
    /// Runs `work(0)`, …, `work(iterations - 1)`, spread over the pool's workers with the caller
    /// helping, and returns when all have finished. The order of iterations is unspecified.
    public static func concurrentPerform(iterations: Int, execute work: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        let participants = min(iterations, DispatchPool.shared.width)
        if participants == 1 {
            for i in 0..<iterations { work(i) }
            return
        }
        withoutActuallyEscaping(work) { escapable in
            // The closure lives in memory the caller owns and frees after the last iteration; a
            // helper that starts late claims nothing and never reads it.
            let slot = UnsafeMutablePointer<@Sendable (Int) -> Void>.allocate(capacity: 1)
            slot.initialize(to: escapable)
            let job = ConcurrentPerformJob(iterations: iterations, participants: participants, work: slot)
            let level = currentRootLevel()
            DispatchPool.shared.submit(DispatchEntry(.block { job.participate() }), level: level, count: participants - 1)
            job.participate()
            job.waitForAll()
            slot.deinitialize(count: 1)
            slot.deallocate()
        }
    }

    /// The QoS level of the queue the caller runs on (default outside queues): helpers run there.
    private static func currentRootLevel() -> Int {
        var queue = DispatchContext.existing?.innermost
        while let q = queue {
            switch q.kind {
            case .root(let level): return level
            case .main: return RunQueues.level(.userInteractive)
            case .serial, .concurrent: queue = q.target
            }
        }
        return RunQueues.level(.default)
    }
}

/// The shared state of one concurrentPerform call.
final class ConcurrentPerformJob: @unchecked Sendable {
    let iterations: Int
    /// Iterations claimed per counter increment: about eight chunks per participant.
    let chunk: Int
    /// The next unclaimed iteration. Relaxed: it only hands out indexes.
    private let next = Atomic<Int>(0)
    /// Iterations finished. Acquiring-and-releasing: the caller that sees the total sees every
    /// iteration's effects.
    private let completed = Atomic<Int>(0)
    /// Set when every iteration has finished (releasing: the caller sees their effects).
    private let done = ParkingEvent()
    /// Valid while some iteration is unfinished (the caller frees it after `waitForAll`).
    private let work: UnsafeMutablePointer<@Sendable (Int) -> Void>

    init(iterations: Int, participants: Int, work: UnsafeMutablePointer<@Sendable (Int) -> Void>) {
        self.iterations = iterations
        chunk = max(1, iterations / (participants * 8))
        self.work = work
    }

    deinit { done.deallocate() }

    /// Claims and runs chunks until none is left.
    func participate() {
        while true {
            let start = next.wrappingAdd(chunk, ordering: .relaxed).oldValue
            if start >= iterations { return }
            let end = min(start + chunk, iterations)
            ConcurrentPerformJob.invoke(work, start, end)
            let total = completed.wrappingAdd(end - start, ordering: .acquiringAndReleasing).newValue
            if total == iterations {
                done.set()
                return
            }
        }
    }

    /// Not inlined, so the copy of the closure it loads is released before `completed` moves (the
    /// caller's withoutActuallyEscaping checks that nothing holds the closure when it returns).
    @inline(never)
    private static func invoke(_ work: UnsafeMutablePointer<@Sendable (Int) -> Void>, _ start: Int, _ end: Int) {
        let body = work.pointee
        for i in start..<end { body(i) }
    }

    /// Caller: waits until every iteration has finished.
    func waitForAll() {
        _ = done.wait(spinLimit: DispatchSpin.longWait, observed: true, retryThreadStarts: true)
    }
}
