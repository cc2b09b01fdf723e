// TKRunLoop+TaskExecutor: a run loop as a Swift TaskExecutor (docs/Concurrency.md §2), so that
// `withTaskExecutorPreference(loop) { … }` and `Task(executorPreference: loop)` keep a task's
// nonisolated code on the loop's thread: each job of such a task runs there as a perform block of
// the loop, in its common modes, FIFO with the loop's other perform blocks and actor jobs: the same
// queue and the same counts as the loop's SerialExecutor conformance (TKRunLoop+Executor.swift
// `submit`). Unlike an actor's isolation, a task executor is only a preference: a job sent after
// the loop's thread finished, or left queued when it finishes, runs on the global concurrent
// executor instead, and a warning on stderr names the thread, once per loop
// (`RunLoopJobBook.redirect`).
//
// Two enqueues, one object. The runtime reaches an executor through the witness table of the
// protocol it uses: SerialExecutor for an actor's jobs, TaskExecutor for the jobs of a task that
// prefers it. Both protocols require `enqueue(_:)`; `@_implements(TaskExecutor, enqueue(_:))` makes
// `enqueue(taskJob:)` the TaskExecutor one, so the loop knows which kind of job it gets:
//   - an actor's job runs isolated to the loop (`runSynchronously(on: UnownedSerialExecutor)`), as
//     before this file existed;
//   - a task's job runs nonisolated with the loop as its task executor
//     (`runSynchronously(on: UnownedTaskExecutor)`): its serial executor is the generic one, which
//     is what nonisolated code asks for, so the runtime lets nonisolated async calls and returns go
//     on inline. Run isolated to the loop instead (SE-0417's one-enqueue pattern), every such call
//     and return would be a switch of serial executors: a round trip through the loop's queue (two
//     per call, measured).
// The task executor is the loop object itself, not a helper: `Task(executorPreference:)` retains
// the executor it is given, and the runtime releases the identity `asUnownedTaskExecutor()`
// returned when the task ends, so the two must be the same object.
//
// No hop: a continuation resumed on the loop's thread (a stream's event: TKStream+Async.swift)
// enqueues its task on the executor it was suspended on: for a task preferring the loop, the loop.
// The task goes on on the same thread in the same pass (the loop drains the blocks a source queued
// before it sleeps), and no other thread ever runs it.
//
// Threads: `enqueue(taskJob:)` and `asUnownedTaskExecutor()` from any thread; jobs run on the
// loop's thread.

extension TKRunLoop: TaskExecutor {
    /// The loop's `TaskExecutor.enqueue`, called by the Swift runtime for the jobs of tasks that
    /// prefer the loop (you do not call it): runs `job` on the loop's thread, nonisolated, with the
    /// loop as its task executor, as a perform block in a common mode, FIFO with the loop's other
    /// blocks. A job sent after the loop's thread finished runs on the global concurrent executor
    /// (a warning says so once per loop).
    @_implements(TaskExecutor,enqueue(_:))
    public func enqueue(taskJob job: consuming ExecutorJob) {
        submit(UnownedJob(job), modes: nil, from: nil, as: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
    }

    /// The loop as a task executor, for `withTaskExecutorPreference(loop)` and
    /// `Task(executorPreference: loop)`: every job of a task that prefers the loop (its
    /// nonisolated code, and the child tasks that inherit the preference) runs on the loop's
    /// thread, as a perform block in the common modes, FIFO with the loop's other blocks and its
    /// actors' jobs. Nonisolated async calls within such a task go on inline on that thread. The
    /// loop must run (in a common mode) for those jobs to run. A preference is not an isolation: a
    /// job sent after the loop's thread finished, or left queued when it finishes, runs on the
    /// global concurrent executor instead, off that thread, and a warning on standard error names
    /// the thread, once per loop (an actor on the loop stops the process there). A continuation resumed on the loop's thread (a stream's
    /// ``TKInputStream/chunks(maxLength:)`` and ``TKOutputStream/write(_:)``) continues the task
    /// on the same thread: no hop.
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor { UnownedTaskExecutor(ordinary: self) }
}
