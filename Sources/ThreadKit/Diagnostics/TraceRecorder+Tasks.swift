// TraceRecorder+Tasks: Swift concurrency in the trace (docs/DiagnosticsTrace.md §9, issue 26
// item 4), and the signposts user code records (§10). Hooks, each behind
// `DiagnosticsSwitch.isOn(.trace)` at its call site, out of line like the others:
//   - a job handed to a ThreadKit executor (a TKRunLoop or its mode executor, a TKDispatchQueue as
//     serial or task executor, the pool as the global executor): `.taskEnqueue`, on the enqueuing
//     thread, before the job is offered (the job may run, and its task end, as soon as it is);
//   - the job running: `.task` begin and end, on the executor's thread;
//   - a task suspended on a ThreadKit object (AsyncWaiters) resumed: `.taskResume`, on the
//     resuming thread.
// A job's task id and priority come from the Swift runtime (`swift_task_getJobTaskId`, the
// function the standard library's own `ExecutorJob.description` calls); a task suspending in
// AsyncWaiters is found with `swift_task_getCurrent`. Both are exported runtime entry points taking
// and returning plain pointers in the Swift calling convention (a `@convention(thin)` function),
// looked up once with dlsym as TKConcurrency looks up its hooks; missing, the id is 0.
//
// Threads: every function runs on the thread the event happens on; nothing here is shared but the
// interval-id counter (a relaxed atomic: only uniqueness matters).
import CThreadKit
import Synchronization

/// The runtime's `swift_task_getJobTaskId` and `swift_task_getCurrent` (also used by a run loop
/// whose thread has ended, to tell a task's job from another: TKRunLoop+Executor.swift).
enum TaskRuntime {
    typealias JobTaskID = @convention(thin) (UnownedJob) -> UInt64
    typealias CurrentTask = @convention(thin) () -> UnsafeMutableRawPointer?

    // safety: the symbols are the runtime's functions of these signatures
    // (include/swift/Runtime/Concurrency.h: `uint64_t swift_task_getJobTaskId(Job *)`,
    // `AsyncTask *swift_task_getCurrent(void)`, both SWIFT_CC(swift)); UnownedJob is one Job pointer.
    static let jobTaskID: JobTaskID? = tk_swift_runtime_symbol("swift_task_getJobTaskId").map {
        unsafeBitCast($0, to: JobTaskID.self)
    }
    static let currentTask: CurrentTask? = tk_swift_runtime_symbol("swift_task_getCurrent").map {
        unsafeBitCast($0, to: CurrentTask.self)
    }
}

extension TaskRuntime {
    /// Whether `job` is no task's job (a continuation's job, which only resumes its task where
    /// that task must run: `Task.yield` makes one): its task id is 0, as `UnownedJob.description`
    /// tells. False when the runtime's entry is missing (then every job counts as a task's).
    static func isNotATask(_ job: UnownedJob) -> Bool { jobTaskID.map { $0(job) == 0 } ?? false }
}

/// The id of the task `job` belongs to (0 for a job that is not a task, or without the runtime's entry).
private func tkJobTaskID(_ job: UnownedJob) -> UInt64 { TaskRuntime.jobTaskID?(job) ?? 0 }

/// The task running on the calling thread (a Job pointer), nil outside a task.
private func tkCurrentTask() -> UnsafeMutableRawPointer? { TaskRuntime.currentTask?() }

extension TraceRecorder {
    // MARK: Tasks

    /// How the exports name the executor kinds that have no label of their own.
    static let runLoopExecutorName = "TKRunLoop"
    static let runLoopModeExecutorName = "TKRunLoopExecutor"
    static let globalExecutorName = "global executor (TKConcurrency)"

    /// `job` handed to the executor named `executor` (before it is offered).
    @inline(never)
    static func taskEnqueued(_ job: UnownedJob, executor: String) {
        record(.taskEnqueue, .instant, named: executor, object: tkJobTaskID(job), detail: job.priority.rawValue)
    }

    /// `job` starts on this thread; returns its task id for `taskEnded`.
    @inline(never)
    static func taskStarts(_ job: UnownedJob, executor: String) -> UInt64 {
        let task = tkJobTaskID(job)
        record(.task, .begin, named: executor, object: task, detail: job.priority.rawValue)
        return task
    }

    /// The job of `task` begun by `taskStarts` has returned (the job may be gone: only its id is used).
    @inline(never)
    static func taskEnded(_ task: UInt64) {
        record(.task, .end, object: task)
    }

    /// The id of the task running on this thread (0 outside a task).
    @inline(never)
    static func currentTaskID() -> UInt64 {
        guard let task = tkCurrentTask() else { return 0 }
        // safety: a task is a Job (AsyncTask derives from Job); UnownedJob is that one pointer.
        return tkJobTaskID(unsafeBitCast(task, to: UnownedJob.self))
    }

    /// This thread resumes `task`, suspended on a ThreadKit object.
    @inline(never)
    static func taskResumed(_ task: UInt64) {
        record(.taskResume, .instant, object: task)
    }

    // MARK: Signposts

    /// Interval ids of `beginInterval` (0 is the nested, closure form's).
    private static let nextInterval = Atomic<UInt64>(0)

    @inline(never)
    static func intervalBegins(_ name: String, id: UInt64) {
        record(.interval, .begin, named: name, object: id)
    }

    @inline(never)
    static func intervalEnds(id: UInt64) {
        record(.interval, .end, object: id)
    }

    static func newIntervalID() -> UInt64 { nextInterval.wrappingAdd(1, ordering: .relaxed).newValue }

    @inline(never)
    static func counter(_ name: String, _ value: Double) {
        record(.counter, .instant, named: name, argument: value.bitPattern)
    }
}
