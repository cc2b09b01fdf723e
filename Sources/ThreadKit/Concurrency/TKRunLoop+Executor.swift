// TKRunLoop+Executor: a run loop as a Swift SerialExecutor (docs/Concurrency.md §2). An actor whose
// `unownedExecutor` is a loop's runs every job on the loop's thread, as a perform block of the loop:
// in the loop's passes, in the executor's modes, FIFO with the loop's other perform blocks.
//
// A loop's thread ending strands its actors' jobs: nothing else may run them (the actor's isolation
// is that thread), so the task would wait forever. Both ways in are misuses that stop the process
// with a message naming the executor, the loop's thread (by name) and the fix:
//   1. a job sent after the thread finished (`submit` finds the loop closed);
//   2. jobs still queued when it finishes (`threadDidFinish` → `refuseJobsLeftAtThreadEnd`), the
//      loop not running or running in a mode the jobs' executor does not serve.
// Why not run them as the thread ends? They were sent to a loop its owner stopped serving: a job
// may need a mode the loop left, hop back to the loop later (refused then anyway), or run in a
// thread-local destructor (an adopted thread's end); a clear stop at the cause beats a hang or a
// crash far from it.
//
// A loop is a TaskExecutor too (TKRunLoop+TaskExecutor.swift): a nonisolated task's jobs come
// through `submit` with `taskExecutor` set, and are counted the same way; but a task executor is
// only a preference, so a task's job that the loop's thread can no longer run (sent after it
// finished, or left queued when it finishes) runs on the global concurrent executor instead, and
// a warning says so once per loop (`RunLoopJobBook.redirect`). So does a job that is no task's (a
// continuation's: `Task.yield` in a task preferring the loop sends one through this
// SerialExecutor enqueue, as `Task.currentExecutor` is the loop), silently: it only resumes its
// task where that task must run, which refuses it again if that is this loop. Only actors' jobs
// are refused.
//
// Threads: `enqueue` from any thread; jobs run on the loop's thread. `RunLoopJobBook`'s counts
// are atomics (see each for its ordering); its mode-executor list and the finished thread's name
// are under mutexes of their own, taken with no other lock held. The stall check runs on a pool
// worker. With the trace on, each job's enqueue (on the sending thread) and run (on the loop's)
// are recorded with its task's id and priority (docs/DiagnosticsTrace.md §9).
import Glibc
import Synchronization

// safety: every stored property is immutable; `tally` holds only atomics.
/// The same loop serving jobs in other modes than the common ones (a tracking mode, say). Each
/// call of `TKRunLoop.executor(forModes:)` makes a distinct executor: actors sharing one share its
/// serial order.
public final class TKRunLoopExecutor: SerialExecutor, @unchecked Sendable {
    /// The loop whose thread runs this executor's jobs.
    public let runLoop: TKRunLoop
    /// The modes the jobs run in: a job runs in a pass of the loop in one of these modes.
    public let modes: [TKRunLoop.Mode]
    /// This executor's own jobs (also counted in the loop's book), so a thread's end can say which
    /// executor left jobs behind.
    let tally = RunLoopJobTally()

    init(runLoop: TKRunLoop, modes: [TKRunLoop.Mode]) {
        self.runLoop = runLoop
        self.modes = modes
    }

    /// Runs `job` on the loop's thread, as a perform block in ``modes``, FIFO with the loop's other
    /// perform blocks. A job sent after the loop's thread finished stops the process with a message.
    public func enqueue(_ job: consuming ExecutorJob) {
        runLoop.submit(UnownedJob(job), modes: modes, from: self, as: asUnownedSerialExecutor())
    }

    /// How messages name it: `executor(forModes: [a, b])`.
    var name: String { "executor(forModes: [\(modes.map(\.rawValue).joined(separator: ", "))])" }

    /// This executor, for an actor's `unownedExecutor`.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
    /// As the loop's `checkIsolated()`: stops the process with a message unless called on the loop's thread.
    public func checkIsolated() { runLoop.checkIsolated() }
    /// True on the loop's thread; nil elsewhere ("cannot tell"), as the loop's own.
    public func isIsolatingCurrentContext() -> Bool? { runLoop.isIsolatingCurrentContext() }
}

extension TKRunLoop: SerialExecutor {
    /// Runs `job` on this loop's thread in a pass of a common mode.
    public func enqueue(_ job: consuming ExecutorJob) {
        submit(UnownedJob(job), modes: nil, from: nil, as: asUnownedSerialExecutor())
    }

    /// The loop as an actor's executor: `nonisolated var unownedExecutor: UnownedSerialExecutor {
    /// loop.asUnownedSerialExecutor() }` makes the actor run on the loop's thread.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// The actor's isolation holds on the loop's own thread: every job of the loop runs there, one
    /// at a time, so its callouts (timers, sources, observers) may `assumeIsolated` too.
    /// nil off the thread ("cannot tell"): the runtime then asks `checkIsolated`, whose message
    /// names the loop and the fix.
    public func isIsolatingCurrentContext() -> Bool? { SystemCall.currentThreadID == ownerThread ? true : nil }

    /// Called by the runtime for `assumeIsolated`: returns on the loop's thread, and anywhere else
    /// stops the process with a message naming the loop's thread and the fix.
    public func checkIsolated() {
        let tid = SystemCall.currentThreadID
        if tid != ownerThread {
            misuse(
                "an actor isolated to the run loop of thread \(ownerThread) was assumed isolated on thread \(tid): its "
                    + "state may only be touched on the loop's thread. Fix: reach the actor with `await`, or call "
                    + "assumeIsolated only in code the loop runs (its jobs, perform blocks, timers, sources).")
        }
    }

    /// An executor serving jobs in `modes` of this loop instead of the common ones.
    public func executor(forModes modes: [Mode]) -> TKRunLoopExecutor {
        let made = TKRunLoopExecutor(runLoop: self, modes: modes)
        jobBook.register(made)
        return made
    }

    /// Queues `job` as a perform block (`modes` nil: the common modes; `modeExecutor`: the mode
    /// executor it was sent to, nil for the loop itself), to run isolated to `executor`, or, with
    /// `taskExecutor` (a task preferring the loop, TKRunLoop+TaskExecutor.swift), nonisolated on
    /// that task executor. A loop whose thread has finished can never run it: a misuse. A loop that
    /// is not running gets the stall check. Sent from the loop's own thread while it runs (a job
    /// of the loop queuing the next one: a task's switch of executors, a resumed continuation),
    /// the job makes the loop's next sleep a poll, so the loop does not sleep with it queued.
    func submit(
        _ job: UnownedJob, modes: [Mode]?, from modeExecutor: TKRunLoopExecutor?, as executor: UnownedSerialExecutor,
        taskExecutor: UnownedTaskExecutor? = nil
    ) {
        // Once the job is queued, this loop may be gone before this function returns: the runtime
        // calls `enqueue` through an unowned executor reference, and the job can run at once on
        // the loop's thread, its task leave the loop, and the last owner of the loop end its thread
        // and release it (an actor hopping onto a short-lived loop thread and off again did this:
        // heap corruption, docs/Concurrency.md §2). So everything needed after that point is
        // taken now, into objects this call holds: the book, the poll (to wake the loop), whether
        // this is the loop's own thread running it, and a weak reference for the stall check.
        let book = jobBook
        let poll = self.poll
        let onOwnThread = SystemCall.currentThreadID == ownerThread
        let running = runDepth.load(ordering: .relaxed) > 0
        let stallWatch = running ? nil : WeakRunLoop(self)
        if running && onOwnThread { pollNextSleep = true } // the next sleep only polls (TKRunLoop.pollNextSleep)
        // Jobs that may run elsewhere once the thread has ended: a task's under a preference, and
        // one that is no task's (asked of the runtime only for a job through this SerialExecutor).
        let movable = taskExecutor != nil || TaskRuntime.isNotATask(job)
        let tally = movable ? book.movableJobs : modeExecutor?.tally
        // Counted before the job is offered: one accepted (queued under the loop's lock) is then
        // already counted when the thread's end, which closes the loop under that lock, reads the
        // counts (the lock orders these relaxed increments before those loads).
        book.all.queued.wrappingAdd(1, ordering: .relaxed)
        tally?.queued.wrappingAdd(1, ordering: .relaxed)
        // The trace (docs/DiagnosticsTrace.md §9): recorded before the job is offered, as it may run
        // (and its task end) as soon as it is.
        let executorName = modeExecutor == nil ? TraceRecorder.runLoopExecutorName : TraceRecorder.runLoopModeExecutorName
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.taskEnqueued(job, executor: executorName) }
        let accepted = enqueueUnlessClosed(
            PendingBlock(
                modes: modes,
                block: {
                    // Run by threadDidFinish when the loop's thread ended with this job queued:
                    // a movable job goes to the global executor instead.
                    if movable && book.threadFinished.load(ordering: .relaxed) {
                        book.redirect(job, ofTaskPreferringTheLoop: taskExecutor != nil)
                        return
                    }
                    let task = DiagnosticsSwitch.isOn(.trace) ? TraceRecorder.taskStarts(job, executor: executorName) : nil
                    if let taskExecutor {
                        job.runSynchronously(on: taskExecutor)
                    } else {
                        job.runSynchronously(on: executor)
                    }
                    if let task { TraceRecorder.taskEnded(task) }
                    // Relaxed: read by the stall check, which only needs to see progress, and by the
                    // thread's end, on this same thread.
                    book.all.ran.wrappingAdd(1, ordering: .relaxed)
                    tally?.ran.wrappingAdd(1, ordering: .relaxed)
                }, isMovableJob: movable),
            wake: false)
        // From here on, no `self`: only what was taken above.
        guard accepted else {
            // Refused: nothing was queued, so the loop is as alive as when this call began.
            if movable {
                // A task's preference only, or no task's job: it runs on the global executor.
                book.recordOwner(book.ownerDescription(of: self))
                book.redirect(job, ofTaskPreferringTheLoop: taskExecutor != nil)
                return
            }
            let by =
                modeExecutor.map { "the loop's \($0.name)" }
                ?? (taskExecutor != nil
                    ? RunLoopJobBook.taskExecutorName : "the TKRunLoop itself (an actor whose unownedExecutor is the loop)")
            let users = taskExecutor != nil ? "tasks prefer it as their task executor" : "actors use it as their executor"
            let last = taskExecutor != nil ? "await those tasks" : "await the actors' last calls"
            misuse(
                "a Swift concurrency job (an actor's or a task's) was sent to the run loop of "
                    + "\(jobBook.ownerDescription(of: self)), through \(by), after that thread finished: nothing will "
                    + "ever run it, and its task would wait forever. Fix: keep the loop's thread running (running its "
                    + "loop) for as long as \(users), e.g. \(last) before letting the thread end.")
        }
        if !onOwnThread { poll.wakeCoalesced() }
        book.queued.wrappingAdd(1, ordering: .relaxed)
        if let stallWatch { book.watchForStall(stallWatch) }
    }

    /// The loop's thread has finished and the loop is closed (called by `threadDidFinish`, on that
    /// thread, after it took the movable jobs out of the queue): each goes to the global executor,
    /// as a task executor is only a preference (`RunLoopJobBook.redirect`, which warns once).
    func redirectJobsLeftAtThreadEnd(_ jobs: [PendingBlock]) {
        jobBook.recordOwner(ownerDescription)
        jobBook.threadFinished.store(true, ordering: .relaxed) // read on this thread, by the blocks below
        for entry in jobs { entry.block() } // each sees `threadFinished` and redirects its job
    }

    /// The loop's thread has finished and the loop is closed (called by `threadDidFinish`, on that
    /// thread, after it set `closed` under the loop's lock): actors' jobs still queued can never
    /// run, and their tasks would wait forever. A misuse, named here rather than left to hang.
    func refuseJobsLeftAtThreadEnd() {
        jobBook.recordOwner(ownerDescription)
        let book = jobBook
        // Jobs run on this thread, so `ran` is exact here; `queued` includes every job the loop
        // accepted (counted before the lock that closed the loop). It may also include one being
        // offered right now, to be refused: an actor's stops the process too, with this message;
        // a movable one is redirected, and is left out here with all of the movable jobs.
        // A job that ended this thread (TKThread.exit inside it) never finished: it counts.
        let left = book.all.waiting &- book.movableJobs.waiting
        guard left > 0 else { return }
        var parts: [String] = []
        var byModeExecutors = 0
        for (name, tally) in book.modeExecutorTallies() {
            let n = tally.waiting
            guard n > 0 else { continue }
            byModeExecutors += n
            parts.append("\(n) for its \(name)")
        }
        if left > byModeExecutors {
            parts.insert(
                "\(left - byModeExecutors) for the TKRunLoop itself (an actor whose unownedExecutor is the loop, "
                    + "served in the common modes)", at: 0)
        }
        misuse(
            "\(ownerDescription) finished with \(left) Swift concurrency job(s) (actors') still queued on its "
                + "run loop — \(parts.joined(separator: "; ")) — because the loop was not running, or was running in a mode "
                + "those executors do not serve, when they were sent: nothing will ever run them, and their tasks would "
                + "wait forever. Fix: keep the thread running its loop, in a mode the actors' executor serves, until the "
                + "actors' calls are done (await them before letting the thread end).")
    }
}

/// Jobs queued and run, for one executor or a whole loop (relaxed atomics: see their uses).
final class RunLoopJobTally: Sendable {
    let queued = Atomic<Int>(0)
    let ran = Atomic<Int>(0)
    /// Queued and not yet run.
    var waiting: Int { queued.load(ordering: .relaxed) &- ran.load(ordering: .relaxed) }
}

/// Counts of a loop's executor jobs, for the stall warning and the thread's end.
final class RunLoopJobBook: Sendable {
    /// Every executor job of the loop, its mode executors' included (`queued` counts a job as it
    /// is offered, before it is on the loop's queue: see `submit`).
    let all = RunLoopJobTally()
    /// The jobs that may run elsewhere once the loop's thread has ended: those of tasks preferring
    /// the loop as their task executor (TKRunLoop+TaskExecutor.swift), and those that are no
    /// task's; left out of the actors' count at the thread's end.
    let movableJobs = RunLoopJobTally()
    /// How messages name the loop as a task executor.
    static let taskExecutorName =
        "the TKRunLoop as a task executor (a task preferring the loop: withTaskExecutorPreference or Task(executorPreference:))"
    /// Jobs on the loop's queue, counted once they are there (what tests wait on). Relaxed: a
    /// statistic; a reader that sees it and then takes the loop's lock (perform) finds the job queued.
    let queued = Atomic<Int>(0)
    /// The loop's mode executors, so the thread's end can name the one that left jobs: each one's
    /// name and tally, kept while the executor lives or jobs of it wait (the executor itself is
    /// held weakly). Made rarely: pruned on each registration.
    private let modeExecutorList = Mutex<[ModeExecutorEntry]>([])
    /// The loop's thread as named when it finished (its object may be gone by the time a late
    /// job arrives). Written once, at the thread's end.
    private let finishedOwner = Mutex<String?>(nil)
    /// A stall check is scheduled (at most one per loop at a time).
    private let checking = Atomic<Bool>(false)
    /// The warning was printed (once per loop).
    private let warned = Atomic<Bool>(false)
    /// The loop's thread has finished: a movable job still queued, run by the thread's end, goes
    /// to the global executor (set and read on that thread).
    let threadFinished = Atomic<Bool>(false)
    /// The redirect warning was printed (once per loop).
    private let redirectWarned = Atomic<Bool>(false)

    private struct ModeExecutorEntry: Sendable {
        weak var executor: TKRunLoopExecutor?
        let name: String
        let tally: RunLoopJobTally
    }

    func register(_ executor: TKRunLoopExecutor) {
        modeExecutorList.withLock { list in
            list.removeAll { $0.executor == nil && $0.tally.waiting == 0 }
            list.append(ModeExecutorEntry(executor: executor, name: executor.name, tally: executor.tally))
        }
    }

    /// Each mode executor's name and tally, the dropped ones' included.
    func modeExecutorTallies() -> [(name: String, tally: RunLoopJobTally)] {
        modeExecutorList.withLock { $0.map { ($0.name, $0.tally) } }
    }

    func recordOwner(_ description: String) {
        finishedOwner.withLock { if $0 == nil { $0 = description } }
    }

    /// `loop`'s thread for a message: as recorded at its end, else as it is now.
    func ownerDescription(of loop: TKRunLoop) -> String {
        finishedOwner.withLock { $0 } ?? loop.ownerDescription
    }

    /// A movable job, which the loop's thread, finished, can no longer run: it runs on the global
    /// concurrent executor instead, as a task executor preference is only a preference (the
    /// task's later jobs come back here, and go there too). Counted as run by the loop's tallies
    /// (it has left the loop). The first job of a task preferring the loop says so on stderr,
    /// once per loop, naming the loop's thread (`recordOwner` was called first). Any thread.
    func redirect(_ job: UnownedJob, ofTaskPreferringTheLoop: Bool) {
        all.ran.wrappingAdd(1, ordering: .relaxed)
        movableJobs.ran.wrappingAdd(1, ordering: .relaxed)
        if ofTaskPreferringTheLoop && !redirectWarned.exchange(true, ordering: .relaxed) {
            let owner = finishedOwner.withLock { $0 } ?? "a finished thread"
            let line =
                "ThreadKit: the run loop of \(owner) has a job of a task that prefers it as its task executor "
                + "(withTaskExecutorPreference or Task(executorPreference:)), but that thread has finished: the loop can never "
                + "run it, so it and every later such job run on the global concurrent executor, off that thread (a task "
                + "executor is only a preference). Fix: keep the loop's thread running its loop until the tasks that "
                + "prefer it are done. (Said once per loop.)\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
        globalConcurrentExecutor.enqueue(ExecutorJob(job))
    }

    /// How long a job may wait on a loop that is not running before the warning:
    /// `TK_EXECUTOR_STALL_MS` (default 2000; 0 turns the check off).
    static let stallDelay: Duration? = {
        let ms = getenv("TK_EXECUTOR_STALL_MS").flatMap { Int(String(cString: $0)) } ?? 2_000
        return ms > 0 ? .milliseconds(ms) : nil
    }()

    /// Jobs were queued on a loop that is not running: if they still have not run after the delay
    /// and the loop is still not running, say so once.
    func watchForStall(_ watched: WeakRunLoop) {
        guard let delay = RunLoopJobBook.stallDelay, !warned.load(ordering: .relaxed),
            !checking.exchange(true, ordering: .relaxed)
        else { return }
        let ranBefore = all.ran.load(ordering: .relaxed)
        TKDispatchQueue.global(qos: .utility).asyncAfter(deadline: .now + delay) {
            self.checking.store(false, ordering: .relaxed)
            guard let loop = watched.loop else { return }
            let waiting = self.all.waiting
            guard waiting > 0, self.all.ran.load(ordering: .relaxed) == ranBefore,
                loop.runDepth.load(ordering: .relaxed) == 0,
                !self.warned.exchange(true, ordering: .relaxed)
            else { return }
            let ms = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
            let line =
                "ThreadKit: \(waiting) Swift concurrency job(s) have waited \(ms) ms for the run loop of "
                + "\(loop.ownerDescription), which is not running: the actors and tasks using it as their executor are stuck. "
                + "Fix: run that loop (run(), or run(mode:before:) in a mode the executor serves: the common modes "
                + "unless made with executor(forModes:)). (TK_EXECUTOR_STALL_MS sets this delay; 0 turns it off.)\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
    }
}

/// A weak reference to a loop, made while the loop is certainly alive (before its job is queued:
/// see `submit`) and read later by the stall check.
struct WeakRunLoop: @unchecked Sendable {
    // safety: @unchecked Sendable for the weak reference, which is itself thread-safe to load;
    // TKRunLoop is Sendable.
    weak var loop: TKRunLoop?
    init(_ loop: TKRunLoop) { self.loop = loop }
}
