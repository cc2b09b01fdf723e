// TKConcurrency: ThreadKit's pool as Swift concurrency's task executor, and, opt-in, as its global
// executor (docs/Concurrency.md §2–3). The install is one store into each of the Swift runtime's
// global-executor hooks (`swift_task_enqueueGlobal_hook` and its delay and deadline variants), the
// mechanism SwiftNIO uses to install its event loops. The hooks are looked up with dlsym.
//
// Threads: `installGlobalExecutor` once, at start-up, on any thread (guarded by `installLock`);
// the hooks are then called by the runtime on any thread. With the trace on, each global job's
// enqueue and run are recorded (docs/DiagnosticsTrace.md §9).
import CThreadKit
import Glibc
import Synchronization

/// ThreadKit and Swift concurrency: the pool as a task executor, whether the main run loop serves
/// the main actor, and, opt-in, the pool as the global executor that runs every task not bound
/// elsewhere (in place of the runtime's libdispatch-based one). Thread-safe.
public enum TKConcurrency {
    /// The pool as a task executor: `withTaskExecutorPreference(TKConcurrency.taskExecutor)` or
    /// `Task(executorPreference: TKConcurrency.taskExecutor)`. Jobs run on pool workers at their
    /// own priority's QoS.
    public static var taskExecutor: TKDispatchQueue { TKDispatchQueue.global() }

    /// Whether the main run loop drains libdispatch's main queue (and with it Swift's main-actor
    /// jobs): false only if libdispatch's run-loop entry points are missing from the process.
    public static var servesDispatchMainQueue: Bool { DispatchMainQueueBridge.shared != nil }

    /// Whether `installGlobalExecutor()` has succeeded in this process.
    public static var isGlobalExecutorInstalled: Bool { installed.load(ordering: .acquiring) }

    /// Makes ThreadKit's pool Swift concurrency's global executor: every task not bound to an actor
    /// or a task executor runs on pool workers at its priority's QoS, `Task.sleep` waits on the
    /// pool's timers, and a task blocked in a ThreadKit wait is seen by the pool (which then starts
    /// another worker). Call it first thing in `main`. Throws `.tooLate` if another global executor
    /// hook is installed, or if the process already has threads ThreadKit did not start (Swift's
    /// default executor has then already started work on its own threads); `.systemCall` if the
    /// runtime has no hooks. A second call after a success does nothing.
    public static func installGlobalExecutor() throws {
        try installLock.withLock { _ in
            if installed.load(ordering: .relaxed) { return }
            guard let enqueue = tk_swift_runtime_symbol("swift_task_enqueueGlobal_hook"),
                let delay = tk_swift_runtime_symbol("swift_task_enqueueGlobalWithDelay_hook"),
                let deadline = tk_swift_runtime_symbol("swift_task_enqueueGlobalWithDeadline_hook")
            else {
                throw TKError(
                    .systemCall,
                    "TKConcurrency.installGlobalExecutor: this Swift runtime has no global-executor "
                        + "hooks (swift_task_enqueueGlobal_hook), so ThreadKit cannot become the global executor. "
                        + "Fix: use TKConcurrency.taskExecutor with withTaskExecutorPreference instead.")
            }
            let enqueueSlot = enqueue.assumingMemoryBound(to: Optional<EnqueueHook>.self)
            let delaySlot = delay.assumingMemoryBound(to: Optional<DelayHook>.self)
            let deadlineSlot = deadline.assumingMemoryBound(to: Optional<DeadlineHook>.self)
            if enqueueSlot.pointee != nil || delaySlot.pointee != nil || deadlineSlot.pointee != nil {
                throw TKError(
                    .tooLate,
                    "TKConcurrency.installGlobalExecutor: another global executor is already installed "
                        + "(swift_task_enqueueGlobal_hook is set, by SwiftNIO or a test harness, say). Fix: install "
                        + "only one global executor per process.")
            }
            let foreign = TKThread.threadsNotStartedByThreadKit()
            if !foreign.isEmpty {
                throw TKError(
                    .tooLate,
                    "TKConcurrency.installGlobalExecutor was called too late: the process already runs "
                        + "\(foreign.count) thread(s) ThreadKit did not start (thread ids \(foreign.prefix(8).map(String.init).joined(separator: ", "))), "
                        + "so Swift's default executor may already be running tasks there. Fix: call it first thing "
                        + "in main, before any Task, Dispatch or Foundation work starts a thread.")
            }
            enqueueSlot.pointee = { job, _ in TKConcurrency.enqueueGlobal(job) }
            delaySlot.pointee = { nanoseconds, job, _ in
                TKConcurrency.enqueueGlobal(job, at: .now + .nanoseconds(Int64(clamping: nanoseconds)))
            }
            deadlineSlot.pointee = { seconds, nanoseconds, _, _, clock, job, _ in
                TKConcurrency.enqueueGlobal(job, at: TKConcurrency.instant(seconds, nanoseconds, clock: clock))
            }
            installed.store(true, ordering: .releasing)
        }
    }

    // MARK: The hooks

    /// The runtime's hook types (Swift calling convention: `@convention(thin)`), from
    /// include/swift/Runtime/Concurrency.h.
    typealias EnqueueOriginal = @convention(thin) (UnownedJob) -> Void
    typealias EnqueueHook = @convention(thin) (UnownedJob, EnqueueOriginal) -> Void
    typealias DelayOriginal = @convention(thin) (UInt64, UnownedJob) -> Void
    typealias DelayHook = @convention(thin) (UInt64, UnownedJob, DelayOriginal) -> Void
    typealias DeadlineOriginal = @convention(thin) (Int64, Int64, Int64, Int64, Int32, UnownedJob) -> Void
    typealias DeadlineHook = @convention(thin) (Int64, Int64, Int64, Int64, Int32, UnownedJob, DeadlineOriginal) -> Void

    private static let installLock = Protected<Void>(())
    /// Set once under `installLock`; releasing so a reader that sees it also sees the hooks.
    private static let installed = Atomic<Bool>(false)

    /// A global job: an entry of the pool at the job's QoS, run on the generic executor (no actor,
    /// no task executor), as the runtime's own Dispatch executor runs it.
    static func enqueueGlobal(_ job: UnownedJob) {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.taskEnqueued(job, executor: TraceRecorder.globalExecutorName) }
        DispatchPool.shared.submit(DispatchEntry(.globalJob(job)), level: RunQueues.level(job.qualityOfService))
    }

    /// Runs a global job on a pool worker (DispatchEntry's `.globalJob`), recording it when tracing.
    static func runGlobal(_ job: UnownedJob) {
        let task = DiagnosticsSwitch.isOn(.trace) ? TraceRecorder.taskStarts(job, executor: TraceRecorder.globalExecutorName) : nil
        job.runSynchronously(on: genericExecutor)
        if let task { TraceRecorder.taskEnded(task) }
    }

    static func enqueueGlobal(_ job: UnownedJob, at deadline: ContinuousClock.Instant) {
        DispatchManager.shared.schedule(at: deadline) { enqueueGlobal(job) }
    }

    /// The runtime's generic executor reference (identity and implementation both 0), which
    /// `swift_job_run` takes for "no particular executor". Built from its two zero words.
    static let genericExecutor: UnownedSerialExecutor = {
        precondition(MemoryLayout<UnownedSerialExecutor>.size == 2 * MemoryLayout<UInt>.size)
        return unsafeBitCast((UInt(0), UInt(0)), to: UnownedSerialExecutor.self)
    }()

    /// A deadline of the runtime's clocks (1 continuous: CLOCK_BOOTTIME, 2 suspending:
    /// CLOCK_MONOTONIC) as a ContinuousClock instant: the same time from now.
    static func instant(_ seconds: Int64, _ nanoseconds: Int64, clock: Int32) -> ContinuousClock.Instant {
        var now = timespec()
        clock_gettime(clock == 1 ? CLOCK_BOOTTIME : CLOCK_MONOTONIC, &now)
        // In Duration's 128-bit arithmetic: a deadline near Int64.min or .max seconds cannot overflow.
        let remaining =
            Duration.seconds(seconds) - .seconds(Int64(now.tv_sec)) + .nanoseconds(nanoseconds) - .nanoseconds(Int64(now.tv_nsec))
        return .now + remaining
    }
}
