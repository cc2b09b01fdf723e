// TKDispatchQueue+Executor: queues as Swift executors (docs/Concurrency.md §2). A serial queue is
// a SerialExecutor (an actor's jobs are entries of the queue, FIFO with its blocks); every queue is
// a TaskExecutor. A job is a `DispatchWork.job` entry: no closure is allocated per job.
//
// Threads: `enqueue` from any thread; jobs run where the queue's entries run (pool workers, or the
// main thread for the main queue). With the trace on, a job's enqueue and run are recorded with its
// task's id and priority (docs/DiagnosticsTrace.md §9).

extension TKDispatchQueue: SerialExecutor, TaskExecutor {
    /// Queues `job` as an entry. On a global queue (the pool) the job runs at its own priority's
    /// QoS; on other queues at the queue's QoS (a serial queue's order is FIFO whatever the priority).
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        // The trace (docs/DiagnosticsTrace.md §9): before the job is offered (it may run at once).
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.taskEnqueued(job, executor: label) }
        if case .root = kind {
            DispatchPool.shared.submit(DispatchEntry(.job(job, self)), level: RunQueues.level(job.qualityOfService))
        } else {
            enqueue(DispatchEntry(.job(job, self)))
        }
    }

    /// A concurrent queue cannot be an actor's executor: its entries run in parallel.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        guard isSerialLane else {
            misuse(
                "\(described) is concurrent and was used as an actor's serial executor: an actor's jobs must run one "
                    + "at a time. Fix: use a serial TKDispatchQueue (no .concurrent attribute) for the actor, or use the "
                    + "concurrent queue as a task executor (withTaskExecutorPreference) instead.")
        }
        return UnownedSerialExecutor(ordinary: self)
    }

    /// The queue as a task executor (`withTaskExecutorPreference`, `Task(executorPreference:)`):
    /// any queue, serial or concurrent, can run tasks' jobs as its entries.
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor { UnownedTaskExecutor(ordinary: self) }

    /// True while the calling thread runs this queue's work (inside one of its entries, directly
    /// or through a queue that targets it; the main queue: on the main thread); otherwise nil
    /// ("cannot tell"), so the runtime asks `checkIsolated`, whose message names the queue.
    public func isIsolatingCurrentContext() -> Bool? { isRunningOnCurrentThread ? true : nil }

    private var isRunningOnCurrentThread: Bool {
        if kind == .main { return MainQueueDriver.onMainThread }
        return DispatchContext.existing?.frame(for: self) != nil
    }

    /// Called by the runtime for `assumeIsolated`: returns while the calling thread runs this
    /// queue's work, and otherwise stops the process with a message naming the queue and the fix.
    public func checkIsolated() {
        if isRunningOnCurrentThread { return }
        misuse(
            "an actor isolated to \(described) was assumed isolated on a thread that is not running that queue: its "
                + "state may only be touched from the queue's work. Fix: reach the actor with `await`, or call "
                + "assumeIsolated only inside work of that queue.")
    }

    /// Runs a job entry of this queue (the frame of the queue is pushed by the caller, as for any
    /// user entry). A serial queue runs it isolated to itself and as its task executor; a concurrent
    /// one only as its task executor (the job is nonisolated code preferring this queue).
    func runJob(_ job: UnownedJob) {
        let task = DiagnosticsSwitch.isOn(.trace) ? TraceRecorder.taskStarts(job, executor: label) : nil
        if isSerialLane {
            job.runSynchronously(isolatedTo: UnownedSerialExecutor(ordinary: self), taskExecutor: asUnownedTaskExecutor())
        } else {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
        if let task { TraceRecorder.taskEnded(task) }
    }
}
