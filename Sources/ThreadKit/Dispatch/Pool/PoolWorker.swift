// PoolWorker: one thread of the dispatch pool and its ParkingObserver. The loop below is the
// worker loop of docs/DispatchPool.md. Fields: `event` is set by wakers (any thread); `isIdle` and
// `idleDeadline` are guarded by the pool's lock; `runningJob` and `countedBlocked` belong to the
// worker's thread (the observer is called only on it).
import Synchronization

final class PoolWorker: ParkingObserver, @unchecked Sendable {
    unowned let pool: DispatchPool
    /// Serves the background level (at the background OS class) instead of the normal ones.
    let background: Bool
    /// Set by the waker that took this worker off the idle stack.
    let event = ParkingEvent()
    /// On the pool's idle stack. Guarded by the pool's lock.
    var isIdle = false
    /// An idle background worker wakes at this instant to check whether waiting background work
    /// has aged (nil: no such work). Guarded by the pool's lock.
    var idleDeadline: ContinuousClock.Instant?
    /// Set once the thread runs (a failed thread start never sets it).
    let started = Atomic<Bool>(false)
    /// The worker's dispatch context (installed as its thread's context).
    let context = DispatchContext()
    /// Jobs taken from the pool with the one running, not started yet, all of `batchLevel`. Worker
    /// thread only (moved back to the pool, under the pool's lock, by this thread).
    let batch = JobRing<DispatchEntry>(capacity: DispatchPool.batchLimit)
    private var batchLevel = 0
    /// Worker thread only: inside a job (parks then mean a blocked worker).
    private var runningJob = false
    /// Worker thread only: the pool counts this worker as blocked right now.
    private var countedBlocked = false
    /// Worker thread only: the level whose OS priority the thread has (-1: not set by the pool; a
    /// new thread inherits whatever its creator had).
    private var appliedLevel = -1

    init(pool: DispatchPool, background: Bool) {
        self.pool = pool
        self.background = background
    }

    deinit { event.deallocate() }

    /// The worker loop: pop a job and run it; with none, sleep idle; retire after idling long.
    func run() {
        started.store(true, ordering: .releasing)
        DispatchContext.install(context)
        Parking.setObserverForCurrentThread(self)
        defer { Parking.setObserverForCurrentThread(nil) }
        // The worker was counted running and searching when it was planned.
        var searching = true
        while true {
            if let entry = batch.popFirst() {
                // More important work arrived meanwhile: it goes first, the batch goes back.
                if pool.nonEmptyMirror.load(ordering: .relaxed) >> (batchLevel + 1) != 0 {
                    batch.prepend(entry)
                    pool.giveBack(self, level: batchLevel)
                    continue
                }
                runJob(entry, level: batchLevel)
                continue
            }
            if let (entry, level) = pool.nextJob(for: self, wasSearching: &searching) {
                batchLevel = level
                runJob(entry, level: level)
                continue
            }
            switch sleepIdle() {
            case .woken: searching = true           // the waker counted it searching
            case .admittedItself: searching = false // aged background work; not counted searching
            case .retired: return
            }
        }
    }

    private func runJob(_ entry: DispatchEntry, level: Int) {
        if level != appliedLevel && !background && WorkerPriority.canRaise {
            WorkerPriority.apply(level: level, to: SystemCall.currentThreadID)
            appliedLevel = level
        }
        runningJob = true
        if entry.isUserWork {
            // A block of a global queue runs "inside" that global queue.
            context.push(TKDispatchQueue.root(level), exclusive: false)
            entry.runObserved(on: TKDispatchQueue.root(level), exclusive: false)
            context.pop()
        } else {
            entry.run()
        }
        runningJob = false
    }

    private enum IdleOutcome { case woken, admittedItself, retired }

    /// Sleeps on the idle stack until woken, admitted by aging, or retired.
    private func sleepIdle() -> IdleOutcome {
        let idleSince = ContinuousClock.now
        var deadline = idleDeadline.map { min($0, idleSince + DispatchPool.idleTimeout) } ?? idleSince + DispatchPool.idleTimeout
        while true {
            if event.wait(deadline: deadline, spinLimit: DispatchSpin.idleWorker, observed: false) { return .woken }
            switch pool.idleTimedOut(self, idleSince: idleSince) {
            case .woken:
                // The waker sets the event right after releasing the pool lock: consume that set
                // now, so it cannot land after the next reset.
                _ = event.wait(spinLimit: DispatchSpin.idleWorker, observed: false)
                return .woken
            case .work:
                return .admittedItself
            case .sleep(let next):
                deadline = next
            case .retire:
                return .retired
            }
        }
    }

    // MARK: ParkingObserver (worker thread only)

    func willPark() {
        guard runningJob, !countedBlocked else { return }
        countedBlocked = true
        pool.workerWillBlock(self, batchLevel: batchLevel)
    }

    func didUnpark() {
        guard countedBlocked else { return }
        countedBlocked = false
        pool.workerDidUnblock(self)
    }
}
