// TKDispatchQueue+ConcurrentPerform: dispatch_apply (docs/DispatchQueues.md, "concurrentPerform").
// The caller and up to cores-1 helper jobs claim chunks of iterations from one shared counter; the
// caller returns once every iteration has finished. Where the helpers run is dispatch_apply's queue
// argument: the caller's level, a QoS, or a queue. Any thread may call it, workers included.
import Synchronization

extension TKDispatchQueue {
    /// Runs `work(0)`, …, `work(iterations - 1)`, spread over the pool's workers with the caller
    /// helping, and returns when all have finished. The order of iterations is unspecified. The
    /// helpers run at the level of the queue the caller runs on (DISPATCH_APPLY_AUTO).
    public static func concurrentPerform(iterations: Int, execute work: @Sendable (Int) -> Void) {
        perform(iterations, level: currentRootLevel(), work)
    }

    /// `concurrentPerform` whose helpers run on the global queue of `qos` (`.unspecified`: the
    /// caller's level, as the form without a QoS).
    public static func concurrentPerform(iterations: Int, qos: TKQualityOfService, execute work: @Sendable (Int) -> Void) {
        perform(iterations, level: qos == .unspecified ? currentRootLevel() : RunQueues.level(qos), work)
    }

    /// dispatch_apply(iterations, queue, block). On a global queue the helpers run at its level; on
    /// a custom concurrent queue every iteration runs on that queue (the helpers are its entries,
    /// the caller's share runs inside `queue.sync`), at its level; on a serial queue or the main
    /// queue every iteration runs in order inside one `queue.sync`, as libdispatch does. `sync`'s
    /// rules apply: calling it from inside a serial `queue` is the deadlock misuse.
    public static func concurrentPerform(iterations: Int, queue: TKDispatchQueue, execute work: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        switch queue.kind {
        case .root(let level):
            perform(iterations, level: level, work)
        case .serial, .main:
            queue.sync { for i in 0..<iterations { work(i) } }
        case .concurrent:
            let participants = min(iterations, DispatchPool.shared.width)
            if participants == 1 {
                queue.sync { for i in 0..<iterations { work(i) } }
                return
            }
            withParticipants(iterations, participants, work) { job in
                for _ in 0..<participants - 1 { queue.async { job.participate() } }
                queue.sync { job.participate() }
            }
        }
    }

    /// The caller plus `min(iterations, cores) - 1` helpers on the global queue of `level`.
    private static func perform(_ iterations: Int, level: Int, _ work: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        let participants = min(iterations, DispatchPool.shared.width)
        if participants == 1 {
            for i in 0..<iterations { work(i) }
            return
        }
        withParticipants(iterations, participants, work) { job in
            DispatchPool.shared.submit(DispatchEntry(.block { job.participate() }), level: level, count: participants - 1)
            job.participate()
        }
    }

    /// Makes the shared job, lets `start` submit the helpers and run the caller's share, then waits
    /// for every iteration.
    private static func withParticipants(
        _ iterations: Int, _ participants: Int, _ work: @Sendable (Int) -> Void,
        start: (ConcurrentPerformJob) -> Void
    ) {
        withoutActuallyEscaping(work) { escapable in
            // The closure lives in memory the caller owns and frees after the last iteration; a
            // helper that starts late claims nothing and never reads it.
            let slot = UnsafeMutablePointer<@Sendable (Int) -> Void>.allocate(capacity: 1)
            slot.initialize(to: escapable)
            let job = ConcurrentPerformJob(iterations: iterations, participants: participants, work: slot)
            start(job)
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

// safety: the counters are atomic; `work` is written before any participant starts and only
// read until `done` is set, after which the caller frees it.
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
