// TKRunLoop+Executor: a run loop as a Swift SerialExecutor (docs/Concurrency.md §2). An actor whose
// `unownedExecutor` is a loop's runs every job on the loop's thread, as a perform block of the loop:
// in the loop's passes, in the executor's modes, FIFO with the loop's other perform blocks.
//
// Threads: `enqueue` from any thread; jobs run on the loop's thread. `RunLoopJobBook` is all
// atomics (see each for its ordering). The stall check runs on a pool worker.
import Glibc
import Synchronization

/// The same loop serving jobs in other modes than the common ones (a tracking mode, say). Each
/// call of `TKRunLoop.executor(forModes:)` makes a distinct executor: actors sharing one share its
/// serial order.
public final class TKRunLoopExecutor: SerialExecutor, @unchecked Sendable {
    public let runLoop: TKRunLoop
    public let modes: [TKRunLoop.Mode]

    init(runLoop: TKRunLoop, modes: [TKRunLoop.Mode]) {
        self.runLoop = runLoop
        self.modes = modes
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        runLoop.submit(UnownedJob(job), modes: modes, as: asUnownedSerialExecutor())
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
    public func checkIsolated() { runLoop.checkIsolated() }
    public func isIsolatingCurrentContext() -> Bool? { runLoop.isIsolatingCurrentContext() }
}

extension TKRunLoop: SerialExecutor {
    /// Runs `job` on this loop's thread in a pass of a common mode.
    public func enqueue(_ job: consuming ExecutorJob) {
        submit(UnownedJob(job), modes: nil, as: asUnownedSerialExecutor())
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// The actor's isolation holds on the loop's own thread: every job of the loop runs there, one
    /// at a time, so its callouts (timers, sources, observers) may `assumeIsolated` too.
    /// nil off the thread ("cannot tell"): the runtime then asks `checkIsolated`, whose message
    /// names the loop and the fix.
    public func isIsolatingCurrentContext() -> Bool? { SystemCall.currentThreadID == ownerThread ? true : nil }

    public func checkIsolated() {
        let tid = SystemCall.currentThreadID
        if tid != ownerThread {
            misuse("an actor isolated to the run loop of thread \(ownerThread) was assumed isolated on thread \(tid): its "
                   + "state may only be touched on the loop's thread. Fix: reach the actor with `await`, or call "
                   + "assumeIsolated only in code the loop runs (its jobs, perform blocks, timers, sources).")
        }
    }

    /// An executor serving jobs in `modes` of this loop instead of the common ones.
    public func executor(forModes modes: [Mode]) -> TKRunLoopExecutor {
        TKRunLoopExecutor(runLoop: self, modes: modes)
    }

    /// Queues `job` as a perform block (`modes` nil: the common modes). A loop whose thread has
    /// finished can never run it: a misuse. A loop that is not running gets the stall check.
    func submit(_ job: UnownedJob, modes: [Mode]?, as executor: UnownedSerialExecutor) {
        let book = jobBook
        let accepted = enqueueUnlessClosed(PendingBlock(modes: modes, block: {
            job.runSynchronously(on: executor)
            // Relaxed: a statistic read by the stall check, which only needs to see progress.
            book.ran.wrappingAdd(1, ordering: .relaxed)
        }))
        guard accepted else {
            misuse("a Swift concurrency job (an actor's or a task's) was sent to the run loop of thread \(ownerThread), "
                   + "whose thread has finished: nothing will ever run it, and its task would wait forever. Fix: keep "
                   + "the loop's thread running (run its loop) for as long as actors use it as their executor.")
        }
        book.queued.wrappingAdd(1, ordering: .relaxed)
        if runDepth.load(ordering: .relaxed) == 0 { book.watchForStall(self) }
    }
}

/// Counts of a loop's executor jobs, for the stall warning.
final class RunLoopJobBook: Sendable {
    let queued = Atomic<Int>(0)
    let ran = Atomic<Int>(0)
    /// A stall check is scheduled (at most one per loop at a time).
    private let checking = Atomic<Bool>(false)
    /// The warning was printed (once per loop).
    private let warned = Atomic<Bool>(false)

    /// How long a job may wait on a loop that is not running before the warning:
    /// `TK_EXECUTOR_STALL_MS` (default 2000; 0 turns the check off).
    static let stallDelay: Duration? = {
        let ms = getenv("TK_EXECUTOR_STALL_MS").flatMap { Int(String(cString: $0)) } ?? 2_000
        return ms > 0 ? .milliseconds(ms) : nil
    }()

    /// Jobs were queued on a loop that is not running: if they still have not run after the delay
    /// and the loop is still not running, say so once.
    func watchForStall(_ loop: TKRunLoop) {
        guard let delay = RunLoopJobBook.stallDelay, !warned.load(ordering: .relaxed),
              !checking.exchange(true, ordering: .relaxed) else { return }
        let ranBefore = ran.load(ordering: .relaxed)
        TKDispatchQueue.global(qos: .utility).asyncAfter(deadline: .now + delay) { [weak loop] in
            self.checking.store(false, ordering: .relaxed)
            guard let loop else { return }
            let waiting = self.queued.load(ordering: .relaxed) - self.ran.load(ordering: .relaxed)
            guard waiting > 0, self.ran.load(ordering: .relaxed) == ranBefore,
                  loop.runDepth.load(ordering: .relaxed) == 0,
                  !self.warned.exchange(true, ordering: .relaxed) else { return }
            let ms = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
            let line = "ThreadKit: \(waiting) Swift concurrency job(s) have waited \(ms) ms for the run loop of thread "
                + "\(loop.ownerThread), which is not running: the actors and tasks using it as their executor are stuck. "
                + "Fix: run that loop (run(), or run(mode:before:) in a mode the executor serves: the common modes "
                + "unless made with executor(forModes:)). (TK_EXECUTOR_STALL_MS sets this delay; 0 turns it off.)\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
    }
}
