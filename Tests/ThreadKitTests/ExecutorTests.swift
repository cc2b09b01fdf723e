// ExecutorTests: docs/Concurrency.md §1–3. Run loops and queues as Swift executors, the main
// thread serving main-actor jobs and Dispatch's main queue (in a child process: XCTest owns this
// process's main thread), and the pool as the global executor (a child process: the hook is
// process-wide). Judges are independent of ThreadKit: pthread ids and a pthread-mutex counter.
import ChildProcessRoles
import Foundation
import Synchronization
import Testing
import XCTest

@testable import ThreadKit

/// The calling OS thread's name, as the kernel has it (/proc/thread-self/comm): which worker
/// runs the code.
func osThreadName() -> String {
    let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
    return comm.trimmingCharacters(in: .newlines)
}

/// A counter and a tally of wrong-thread calls under a pthread mutex.
final class PthreadTally: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var values: [String: Int] = [:]
    init() { pthread_mutex_init(&mutex, nil) }
    func add(_ key: String, _ n: Int = 1) {
        pthread_mutex_lock(&mutex)
        values[key, default: 0] += n
        pthread_mutex_unlock(&mutex)
    }
    subscript(_ key: String) -> Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return values[key] ?? 0
    }
}

/// A loop thread whose pthread identity is known (the judge of "ran on the loop's thread").
final class ExecutorLoop: @unchecked Sendable {
    let worker = LoopThread(name: "executor-loop")
    private(set) var pthread = pthread_t()

    init() {
        let box = Shared(pthread_t())
        let ready = DispatchSemaphore(value: 0)
        worker.loop.perform {
            box.value = pthread_self()
            ready.signal()
        }
        ready.wait()
        pthread = box.value
    }

    var loop: TKRunLoop { worker.loop }
    var isCurrent: Bool { pthread_equal(pthread_self(), pthread) != 0 }
}

/// An actor on a given executor that checks, with pthread ids, where each call runs.
actor ThreadCheckedActor {
    private let executor: UnownedSerialExecutor
    private let expected: @Sendable () -> Bool
    private let tally: PthreadTally
    private(set) var calls = 0
    private var perTask: [Int: Int] = [:]

    init(_ executor: UnownedSerialExecutor, tally: PthreadTally, expected: @escaping @Sendable () -> Bool) {
        self.executor = executor
        self.tally = tally
        self.expected = expected
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { executor }

    /// One call of task `task`, its `seq`-th: counts calls off the expected thread and out of order.
    func call(task: Int, seq: Int) {
        if !expected() { tally.add("wrongThread") }
        if (perTask[task] ?? -1) != seq - 1 { tally.add("outOfOrder") }
        perTask[task] = seq
        calls += 1
    }

    func where_() -> pthread_t { pthread_self() }
}

final class ExecutorTests: XCTestCase {
    // MARK: The main thread

    func testTheMainThreadServesThreadKitDispatchAndTheMainActorInOrder() throws {
        let result = try ChildProcess.run("main-thread-mix", ["2000"])
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("ran 18000 of 18000 items; off the main thread: 0"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("per submitter and path in order: true"))
        XCTAssertTrue(result.standardOutput.contains("one FIFO per submitter: true"))
        XCTAssertTrue(result.standardOutput.contains("MainActor.assumeIsolated in a TKRunLoop.main callout: true"))
        XCTAssertTrue(result.standardOutput.contains("work queued before the loop first ran: 2 of 2"), result.standardOutput)
    }

    // MARK: A run loop as an actor's executor

    func testAnActorOnARunLoopGetsEveryCallOnTheLoopsThread() async {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let tally = PthreadTally()
        let actor = ThreadCheckedActor(host.loop.asUnownedSerialExecutor(), tally: tally) { host.isCurrent }
        let tasks = 8
        let perTask = stress(100_000) / 8
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<tasks {
                group.addTask { for i in 0..<perTask { await actor.call(task: t, seq: i) } }
            }
        }
        let calls = await actor.calls
        XCTAssertEqual(calls, tasks * perTask)
        XCTAssertEqual(tally["wrongThread"], 0, "calls ran off the loop's thread")
        XCTAssertEqual(tally["outOfOrder"], 0, "a task's calls ran out of order")
    }

    func testALoopInATrackingModeHoldsActorJobsBackUntilItReturnsToACommonMode() async throws {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let tracking: TKRunLoop.Mode = "tracking"
        let loop = host.loop
        let inTracking = Flag()
        let ranBeforeLeaving = Shared<Bool?>(nil)
        let ranInMode = Shared<TKRunLoop.Mode?>(nil)
        // The loop enters the tracking mode (nested), kept alive there by a source.
        loop.perform {
            let keep = TKRunLoopSource {}
            TKRunLoop.current.add(keep, forMode: tracking)
            inTracking.set()
            TKRunLoop.current.run(mode: tracking, before: .now + .seconds(30))
            TKRunLoop.current.remove(keep, forMode: tracking)
        }
        XCTAssertTrue(inTracking.wait())
        let done = Flag()
        let counter = ThreadCheckedActor(loop.asUnownedSerialExecutor(), tally: PthreadTally()) {
            ranInMode.value = TKRunLoop.current.currentMode
            return true
        }
        Task {
            await counter.call(task: 0, seq: 0)
            done.set()
        }
        // The job is queued on the loop (its book says so) ...
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { loop.jobBook.queued.load(ordering: .relaxed) == 1 })
        // ... and a tracking pass behind it does not run it; that block then leaves the mode.
        loop.perform(inModes: [tracking]) {
            ranBeforeLeaving.value = done.isSet || ranInMode.value != nil
            TKRunLoop.current.stop()
        }
        XCTAssertTrue(done.wait(), "the job never ran after the loop left the tracking mode")
        XCTAssertEqual(ranBeforeLeaving.value, false, "the job ran in the tracking mode")
        XCTAssertEqual(ranInMode.value, .default)
    }

    func testAModeExecutorServesOnlyItsModes() async {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let custom: TKRunLoop.Mode = "custom-executor-mode"
        let executor = host.loop.executor(forModes: [custom])
        XCTAssertTrue(executor.runLoop === host.loop)
        let ranIn = Shared<TKRunLoop.Mode?>(nil)
        let actor = ThreadCheckedActor(executor.asUnownedSerialExecutor(), tally: PthreadTally()) {
            ranIn.value = TKRunLoop.current.currentMode
            return true
        }
        let done = Flag()
        Task {
            await actor.call(task: 0, seq: 0)
            done.set()
        }
        // The loop runs only .default: the job is queued, and a default pass behind it leaves it.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { host.loop.jobBook.queued.load(ordering: .relaxed) == 1 })
        let seenInDefault = Shared<Bool?>(nil)
        let looked = Flag()
        host.loop.perform(inModes: [.default]) {
            seenInDefault.value = done.isSet
            looked.set()
        }
        XCTAssertTrue(looked.wait())
        XCTAssertEqual(seenInDefault.value, false, "the job ran in the default mode")
        // A later pass in the custom mode runs it.
        host.loop.perform {
            let keep = TKRunLoopSource {}
            TKRunLoop.current.add(keep, forMode: custom)
            _ = TKRunLoop.current.run(mode: custom, before: .now + .seconds(30))
            TKRunLoop.current.remove(keep, forMode: custom)
        }
        XCTAssertTrue(done.wait())
        host.loop.perform(inModes: [custom]) { TKRunLoop.current.stop() }
        XCTAssertEqual(ranIn.value, custom)
    }

    func testAssumeIsolatedWorksInTheLoopsOwnCallouts() async {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let actor = ThreadCheckedActor(host.loop.asUnownedSerialExecutor(), tally: PthreadTally()) { true }
        let result = Shared(-1)
        let done = DispatchSemaphore(value: 0)
        host.loop.perform {
            actor.preconditionIsolated()
            result.value = actor.assumeIsolated { $0.calls }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(result.value, 0)
    }

    func testExecutorSwitchesBetweenALoopAQueueAndThePoolInBothDirections() async {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let queue = TKDispatchQueue(label: "switch")
        let queueThread = Shared(pthread_t())
        let onQueue = { @Sendable in queue.isIsolatingCurrentContext() == true }
        let tally = PthreadTally()
        let onLoop = ThreadCheckedActor(host.loop.asUnownedSerialExecutor(), tally: tally) { host.isCurrent }
        let onSerialQueue = ThreadCheckedActor(queue.asUnownedSerialExecutor(), tally: tally) {
            queueThread.value = pthread_self()
            return !host.isCurrent && onQueue()
        }
        for i in 0..<1_000 {
            await onLoop.call(task: 0, seq: i)
            await onSerialQueue.call(task: 0, seq: i)
            // Back on the pool (nonisolated code) between the two.
            if host.isCurrent { tally.add("nonisolatedOnLoop") }
        }
        let loopCalls = await onLoop.calls
        let queueCalls = await onSerialQueue.calls
        XCTAssertEqual(loopCalls, 1_000)
        XCTAssertEqual(queueCalls, 1_000)
        XCTAssertEqual(tally["wrongThread"], 0)
        XCTAssertEqual(tally["outOfOrder"], 0)
        XCTAssertEqual(tally["nonisolatedOnLoop"], 0)
    }

    // MARK: Queues as executors

    func testAnActorOnASerialQueueRunsOneCallAtATimeOnPoolWorkers() async {
        let queue = TKDispatchQueue(label: "actor-queue")
        let tally = PthreadTally()
        let inside = Atomic<Int>(0)
        let actor = ThreadCheckedActor(queue.asUnownedSerialExecutor(), tally: tally) {
            if inside.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue != 0 { tally.add("overlap") }
            inside.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            return osThreadName().hasPrefix("tk.dispatch")
        }
        let tasks = 8
        let perTask = stress(100_000) / 8
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<tasks { group.addTask { for i in 0..<perTask { await actor.call(task: t, seq: i) } } }
        }
        let calls = await actor.calls
        XCTAssertEqual(calls, tasks * perTask)
        XCTAssertEqual(tally["wrongThread"], 0)
        XCTAssertEqual(tally["outOfOrder"], 0)
        XCTAssertEqual(tally["overlap"], 0)
    }

    func testQueuesAndThePoolAreTaskExecutors() async {
        let concurrent = TKDispatchQueue(label: "task-executor", attributes: .concurrent)
        for executor in [TKConcurrency.taskExecutor, concurrent, TKDispatchQueue(label: "serial-task-executor")] {
            let name = await withTaskExecutorPreference(executor) { () async -> String in
                await Task.yield()
                return osThreadName()
            }
            XCTAssertTrue(name.hasPrefix("tk.dispatch"), "\(executor.label): ran on \(name)")
            let detached = await Task(executorPreference: executor) { osThreadName() }.value
            XCTAssertTrue(detached.hasPrefix("tk.dispatch"), detached)
        }
    }

    func testAJobKeepsItsPriorityOnThePool() async {
        // A background task on the pool runs on a worker of the background tier.
        let name = await Task(executorPreference: TKConcurrency.taskExecutor, priority: .background) { osThreadName() }.value
        XCTAssertTrue(name.hasPrefix("tk.dispatch.bg"), "ran on \(name)")
        let high = await Task(executorPreference: TKConcurrency.taskExecutor, priority: .high) { osThreadName() }.value
        XCTAssertFalse(high.hasPrefix("tk.dispatch.bg"), high)
        XCTAssertEqual(TKQualityOfService(TaskPriority.high), .userInitiated)
        XCTAssertEqual(TKQualityOfService(TaskPriority.medium), .default)
        XCTAssertEqual(TKQualityOfService(TaskPriority.low), .utility)
        XCTAssertEqual(TKQualityOfService(TaskPriority.background), .background)
        for qos in [TKQualityOfService.background, .utility, .default, .userInitiated, .userInteractive] {
            XCTAssertEqual(TKQualityOfService(qos.taskPriority), qos)
        }
    }

    // MARK: The pool as the global executor (child processes)

    func testThePoolAsGlobalExecutorRunsAMillionTasksExactly() throws {
        let n = stress(1_000_000)
        let result = try ChildProcess.run("global-executor", ["\(n)"], timeout: .seconds(120))
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("tasks run: \(n) of \(n); on pool workers: \(n)"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("slept at least 20 ms; resumed on the pool: true"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("8 tasks blocked in a TKDispatchSemaphore wait all finished"), result.standardOutput)
    }

    func testInstallingTheGlobalExecutorTooLateIsRefused() throws {
        let result = try ChildProcess.run("global-executor-too-late")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("refused: TKError.tooLate"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("first thing in main"), result.standardOutput)
    }

    // MARK: Misuse

    func testAJobWaitingOnALoopNobodyRunsIsReported() throws {
        let result = try ChildProcess.run("executor-stalled-loop")
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(result.standardError.contains("have waited 100 ms for the run loop of thread"), result.standardError)
        XCTAssertTrue(result.standardError.contains("which is not running"), result.standardError)
    }
}

extension ExecutorTests {
    func testTheMainLoopServesDispatchsMainQueueHere() {
        XCTAssertTrue(TKConcurrency.servesDispatchMainQueue, "libdispatch's run-loop entry points were not found")
    }
}

extension ExecutorTests {
    /// The seeds' table: the main loop's common modes are default, modal panel and event tracking;
    /// a secondary loop starts with default only.
    func testTheMainLoopsCommonModesIncludeTrackingAndModalPanelButASecondaryLoopsDoNot() {
        for mode in [TKRunLoop.Mode.eventTracking, .modalPanel] {
            let fired = Flag()
            let timer = TKTimer(fireAt: .now, interval: .zero, repeats: false) { _ in
                fired.set()
                TKRunLoop.main.stop()
            }
            TKRunLoop.main.add(timer, forMode: .common)
            let deadline = ContinuousClock.now + .seconds(30)
            while !fired.isSet && ContinuousClock.now < deadline {
                _ = TKRunLoop.main.run(mode: mode, before: deadline)
            }
            XCTAssertTrue(fired.isSet, "a common-mode timer did not fire while the main loop ran \(mode)")
        }
        let result = Shared<TKRunLoop.RunResult?>(nil)
        let t = TKThread {
            TKRunLoop.current.add(TKTimer(interval: .seconds(3600), repeats: false) { _ in }, forMode: .common)
            result.value = TKRunLoop.current.run(mode: .eventTracking, for: .seconds(30), returnAfterSourceHandled: false)
        }
        t.isDetached = false
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(30)))
        XCTAssertEqual(result.value, .finished, "a secondary loop's eventTracking mode is not common")
    }
}

/// Executor misuses, each an exit test (Support/MisuseAssertions.swift).
@Suite struct ExecutorExitTests {
    @Test func aConcurrentQueueAsAnActorsExecutorIsAMisuse() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = TKDispatchQueue(label: "parallel", attributes: .concurrent)
            _ = await PinnedCounter(queue.asUnownedSerialExecutor()).increment()
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"parallel\"", "concurrent", "serial executor", "Fix:"])
    }

    @Test func aJobForTheLoopOfAFinishedThreadIsAMisuse() async {
        // Named as the thread was, though its object is gone by then.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = LoopBox()
            var thread: TKThread? = TKThread(name: "finished-loop") { box.loop = TKRunLoop.current }
            thread?.isDetached = false
            thread?.start()
            thread?.join() // publishes box.loop
            thread = nil // the thread's object is gone too: the message still names it
            let counter = PinnedCounter(box.loop!.asUnownedSerialExecutor())
            let done = TKDispatchSemaphore(value: 0)
            Task {
                _ = await counter.increment()
                done.signal()
            }
            // Stops at the enqueue; never past this deadline unless the job was silently dropped.
            _ = done.wait(until: .now + .seconds(20))
        }
        expectMisuse(
            result,
            mentions: [
                "run loop of thread", "(\"finished-loop\")", "the TKRunLoop itself", "after that thread finished", "Fix:",
            ])
    }

    @Test func assumingALoopActorsIsolationOffTheLoopIsAMisuse() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let counter = PinnedCounter(TKRunLoop.main.asUnownedSerialExecutor())
            let t = TKThread { counter.assumeIsolated { _ = $0.count } }
            t.isDetached = false
            t.start()
            t.join()
        }
        expectMisuse(result, mentions: ["assumed isolated on thread", "Fix:"])
    }

    // A loop's thread ends with an actor job still queued on the loop: the process stops at the
    // thread's end with a message naming the thread, the executor and the fix — not a silent hang
    // (the loop in another mode), nor the 2 s stall warning asking to run a loop whose thread is
    // gone (the loop idle). A job dropped silently, or run after all, lets the process exit.

    @Test func aThreadEndingIdleWithAnActorJobQueuedOnItsLoopStopsTheProcessNamingIt() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            endALoopsThreadWithAnActorJobQueued(.idle)
        }
        expectThreadEndedWithJob(result, executor: "1 for the TKRunLoop itself")
    }

    @Test func aThreadEndingInAnotherModeWithAnActorJobQueuedOnItsLoopStopsTheProcessNamingIt() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            endALoopsThreadWithAnActorJobQueued(.otherMode)
        }
        expectThreadEndedWithJob(result, executor: "1 for the TKRunLoop itself")
    }

    @Test func aThreadEndingWithAnActorJobQueuedOnAModeExecutorStopsTheProcessNamingIt() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            endALoopsThreadWithAnActorJobQueued(.modeExecutor)
        }
        expectThreadEndedWithJob(result, executor: "1 for its executor(forModes: [tk.test.other])")
    }

    private func expectThreadEndedWithJob(
        _ result: ExitTest.Result?, executor: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectMisuse(
            result,
            mentions: [
                "(\"ending-loop\") finished with 1 Swift concurrency job(s)", executor, "nothing will ever run them",
                "Fix: keep the thread running its loop",
            ], sourceLocation: sourceLocation)
        let standardError = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(!standardError.contains("have waited"), "the stall warning came first: \(standardError)", sourceLocation: sourceLocation)
    }
}

/// Where the actor's job waits when its loop's thread ends.
private enum QueuedJob {
    /// The loop is not running (the job arms the stall check).
    case idle
    /// The loop runs in a private mode, the job is for the common modes.
    case otherMode
    /// The actor's executor serves a private mode, the loop runs `.default`.
    case modeExecutor
}

/// A loop's thread ends while an actor's job waits on its loop; the job's task never resumes
/// unless ThreadKit stops the process (at the thread's end, naming the thread "ending-loop"). The
/// job is queued from the loop's own thread, in code isolated to the actor (a Task made there is
/// enqueued on the actor's executor before `Task.init` returns), so it is known to be queued when
/// the thread ends. Returns (and the process exits) if the call finished, or had not 20 s later.
private func endALoopsThreadWithAnActorJobQueued(_ variant: QueuedJob) {
    let other = TKRunLoop.Mode("tk.test.other")
    let done = TKDispatchSemaphore(value: 0)
    let thread = TKThread(name: "ending-loop") {
        let loop = TKRunLoop.current
        let modeExecutor = loop.executor(forModes: [other]) // held below: actors hold executors unowned
        let counter = PinnedCounter(
            variant == .modeExecutor ? modeExecutor.asUnownedSerialExecutor() : loop.asUnownedSerialExecutor())
        /// Queues one job of the actor on its executor, from this thread.
        @Sendable func queueJob() {
            _ = counter.assumeIsolated { counter in
                Task {
                    _ = counter.increment()
                    done.signal()
                }
            }
        }
        switch variant {
        case .idle:
            queueJob()
        case .otherMode, .modeExecutor:
            let mode = variant == .otherMode ? other : .default
            loop.perform(inModes: [mode]) {
                queueJob()
                loop.stop()
            }
            _ = loop.run(mode: mode, before: .now + .seconds(20))
        }
        withExtendedLifetime((counter, modeExecutor)) {}
        // The thread ends here, the job still queued.
    }
    thread.start()
    _ = done.wait(until: .now + .seconds(20))
}

/// A thread's run loop, handed to the thread that joins it.
private final class LoopBox: @unchecked Sendable {
    // safety: written by the thread before it ends, read after join(), which orders the two.
    var loop: TKRunLoop?
}
