// TaskExecutorTests: docs/Concurrency.md §2, task executors. A run loop as a TaskExecutor keeps the
// nonisolated code of a task that prefers it on the loop's thread (the body, resumes after
// suspensions, child tasks, Task(executorPreference:)), and nonisolated async calls continue inline
// instead of going back through the loop's queue; a serial TKDispatchQueue as a TaskExecutor runs
// the tasks preferring it one job at a time. A loop whose thread ends under tasks that prefer it
// (child processes): their jobs run on the global executor, with one warning per loop.
// A loop does not sleep with a job its own thread queued. Judges: pthread ids (IOLoopThread with no
// pass deadline: a missed wake-up is a hang), the loop's FIFO of perform blocks, an overlap counter; and the process surviving 300 short-lived loop threads whose actors
// a task hops on and off (a use after free in enqueue, found by this suite), and of short-lived
// queues that tasks are resumed onto from other threads.
import Foundation
import ThreadKit
import XCTest

/// `n` nested nonisolated async calls that never suspend; returns `n`.
@inline(never)
func nonisolatedDepth(_ n: Int) async -> Int {
    n == 0 ? 0 : await nonisolatedDepth(n - 1) + 1
}

/// An actor on a given loop that starts a task isolated to itself from its own job, that is,
/// from the loop's thread.
actor LoopPinned {
    let loop: TKRunLoop
    let marked = Flag()
    init(loop: TKRunLoop) { self.loop = loop }
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    func startChild() {
        Task { self.mark() }
    }

    func mark() { marked.set() }
}

/// Counts the notes taken off a given thread (pthread ids, under a pthread mutex).
final class ThreadNotes: @unchecked Sendable {
    private let thread: pthread_t
    private let notes = Guarded<(count: Int, off: [String])>((0, []))

    init(thread: pthread_t) { self.thread = thread }

    /// Notes one resume point, named `label`, and whether it runs on the thread.
    func note(_ label: String) {
        let on = pthread_equal(pthread_self(), thread) != 0
        notes.withLock {
            $0.count += 1
            if !on { $0.off.append(label) }
        }
    }

    var count: Int { notes.withLock { $0.count } }
    /// The labels noted off the thread.
    var off: [String] { notes.withLock { $0.off } }
}

final class TaskExecutorTests: XCTestCase {
    func testALoopAsTaskExecutorKeepsATasksNonisolatedCodeOnItsThread() async {
        let host = IOLoopThread(name: "task-loop", passDeadline: nil)
        defer { host.stop() }
        let notes = ThreadNotes(thread: host.pthread)
        await withTaskExecutorPreference(host.loop) {
            notes.note("body")
            await Task.yield()
            notes.note("after yield")
            _ = await nonisolatedDepth(10)
            notes.note("after nested calls")
            async let child: Void = notes.note("async let")
            await child
            await withTaskGroup(of: Void.self) { group in
                for i in 0..<4 {
                    group.addTask {
                        await Task.yield()
                        notes.note("group child \(i)")
                    }
                }
            }
            notes.note("after group")
        }
        await Task(executorPreference: host.loop) { notes.note("Task(executorPreference:)") }.value
        XCTAssertEqual(notes.count, 10)
        XCTAssertEqual(notes.off, [], "ran off the loop's thread")
    }

    /// A perform block queued from inside the task's job runs only when the task gives the thread
    /// back to the loop: it must not have run after 1,000 nested nonisolated async calls (each
    /// would otherwise go back through the loop's queue, behind it), and must have after a yield.
    func testNonisolatedCallsOnALoopContinueInlineWithoutGoingThroughItsQueue() async {
        let host = IOLoopThread(name: "inline-loop", passDeadline: nil)
        defer { host.stop() }
        let (depth, ranDuringCalls, ranAtYield) = await withTaskExecutorPreference(host.loop) { () async -> (Int, Bool, Bool) in
            let marker = Flag()
            host.loop.perform { marker.set() }
            let depth = await nonisolatedDepth(1_000)
            let during = marker.isSet
            await Task.yield()
            return (depth, during, marker.isSet)
        }
        XCTAssertEqual(depth, 1_000)
        XCTAssertFalse(ranDuringCalls, "a nonisolated call went back through the loop's queue")
        XCTAssertTrue(ranAtYield, "the judge did not see the yield go through the loop's queue")
    }

    /// A job a loop's own job queues on that loop (a task's yield; an actor's child task) runs
    /// without another wake-up: the loop does not go to sleep with it queued. The loop runs with no
    /// deadline, so before the fix these waited for a wake-up that never came.
    func testJobsQueuedFromTheLoopsOwnThreadRunWithoutAnotherWakeUp() async {
        let host = IOLoopThread(name: "self-queuing-loop", passDeadline: nil)
        defer { host.stop() }
        let loop: TKRunLoop = host.loop
        let yields = Task(executorPreference: loop) { () -> Bool in
            for _ in 0..<100 { await Task.yield() }
            return host.isCurrent
        }
        let onLoop = await outcome(of: yields, within: .seconds(30))
        XCTAssertEqual(onLoop, true, "a task yielding on its loop did not finish (or left the loop's thread)")
        let actor = LoopPinned(loop: loop)
        await actor.startChild()
        let childRan = await eventually(.now + .seconds(30)) { actor.marked.isSet }
        XCTAssertTrue(childRan, "the child task of a loop's actor never ran")
    }

    /// A task hops onto an actor pinned to a short-lived loop thread and off again, the thread
    /// ends and the loop is released, 300 times over. The runtime reaches an executor through an
    /// unowned reference, so once `enqueue` has queued the job the loop may be freed before
    /// `enqueue` returns; `enqueue` touched the loop after that (its wake flag, its stall check's
    /// weak reference), which corrupted the heap in about one run in ten under CPU load. The
    /// judge is the process surviving: a use after free here crashes it, or malloc later.
    func testHoppingOnAndOffActorsOfShortLivedLoopThreadsTouchesNoFreedLoop() async {
        let marks = Guarded(0)
        for i in 0..<300 {
            let host = IOLoopThread(name: "short-lived-\(i)", passDeadline: nil)
            let actor = LoopPinned(loop: host.loop)
            await actor.mark()
            if actor.marked.isSet { marks.withLock { $0 += 1 } }
            host.stop()
        }
        XCTAssertEqual(marks.withLock { $0 }, 300)
    }

    /// Tasks preferring a concurrent queue made for them (targeting a serial queue made for it),
    /// resumed from libdispatch's threads: the resuming thread's `enqueue` may still be running
    /// when another task's token has run the job, the group has ended and the queues are freed.
    func testTasksResumedOntoShortLivedQueuesTouchNoFreedQueue() async {
        let finished = Guarded(0)
        let rounds = stress(200)
        for i in 0..<rounds {
            let target = TKDispatchQueue(label: "short-lived-target-\(i)")
            let queue = TKDispatchQueue(label: "short-lived-\(i)", attributes: .concurrent, target: target)
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask(executorPreference: queue) {
                        for _ in 0..<3 {
                            await withCheckedContinuation { (resume: CheckedContinuation<Void, Never>) in
                                DispatchQueue.global().async { resume.resume() }
                            }
                        }
                        finished.withLock { $0 += 1 }
                    }
                }
            }
        }
        XCTAssertEqual(finished.withLock { $0 }, rounds * 4)
    }

    func testTasksPreferringASerialQueueRunOneJobAtATimeOnIt() async {
        let queue = TKDispatchQueue(label: "serial-task-executor")
        let inside = Guarded(0)
        let tally = Guarded((overlaps: 0, offQueue: 0, steps: 0))
        let tasks = 8
        let steps = stress(2_000) / tasks
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<tasks {
                group.addTask(executorPreference: queue) {
                    for _ in 0..<steps {
                        let overlapped = inside.withLock {
                            $0 += 1
                            return $0 > 1
                        }
                        let onQueue = queue.isIsolatingCurrentContext() == true
                        tally.withLock {
                            if overlapped { $0.overlaps += 1 }
                            if !onQueue { $0.offQueue += 1 }
                            $0.steps += 1
                        }
                        inside.withLock { $0 -= 1 }
                        await Task.yield()
                    }
                }
            }
        }
        let counts = tally.withLock { $0 }
        XCTAssertEqual(counts.steps, tasks * steps)
        XCTAssertEqual(counts.overlaps, 0, "two jobs ran at once on a serial queue")
        XCTAssertEqual(counts.offQueue, 0, "a job ran off the queue")
    }

    // MARK: A loop whose thread ends (child processes)

    /// The warning a loop gives, once, when its thread has ended under tasks that prefer it.
    private static let redirectWarning = "but that thread has finished: the loop can never run it, so it and every later such job run"

    /// Checks a child's output: exit 0, `finished` in its output, and the warning exactly once
    /// per loop, naming the loop's thread.
    private func assertRedirected(_ result: ChildResult, finished: String, thread: String, line: UInt = #line) {
        let what = "status \(result.status), \(result.standardOutput) \(result.standardError)"
        XCTAssertFalse(result.signalled, what, line: line)
        XCTAssertEqual(result.status, 0, what, line: line)
        XCTAssertTrue(result.standardOutput.contains(finished), what, line: line)
        XCTAssertFalse(result.standardError.contains("ThreadKit misuse"), what, line: line)
        let warnings = result.standardError.components(separatedBy: Self.redirectWarning).count - 1
        XCTAssertEqual(warnings, 1, "one warning per loop: \(result.standardError)", line: line)
        for fragment in [
            "ThreadKit: the run loop of thread", "(\"\(thread)\") has a job of a task that prefers it as its task executor",
            "on the global concurrent executor", "a task executor is only a preference", "Fix: keep the loop's thread running",
        ] {
            XCTAssertTrue(result.standardError.contains(fragment), "lacks \"\(fragment)\": \(result.standardError)", line: line)
        }
    }

    func testATaskPreferringTheLoopOfAFinishedThreadRunsOnTheGlobalExecutor() throws {
        let result = try ChildProcess.run("task-executor-finished-loop", timeout: .seconds(90))
        assertRedirected(result, finished: "task finished", thread: "finished-loop")
    }

    func testTasksJobsLeftQueuedWhenTheLoopsThreadEndsRunOnTheGlobalExecutor() throws {
        let result = try ChildProcess.run("task-executor-thread-ends-with-job", timeout: .seconds(90))
        assertRedirected(result, finished: "500 of 500 tasks finished", thread: "ending-loop")
    }

    /// Issue 49: 1,000 tasks in `withTaskExecutorPreference(loop)`, suspended on the loop, whose
    /// thread then ends: each resume (and each later call, return and yield) is an enqueue on the
    /// loop, which once stopped the process; all go on, on other threads, and finish.
    func testTasksPreferringALoopWhoseThreadEndsUnderThemAllFinish() throws {
        let result = try ChildProcess.run("task-executor-loop-ends-under-tasks", timeout: .seconds(90))
        assertRedirected(result, finished: "finished: 1000 of 1000, 1000 off the loop's thread", thread: "short-loop")
        XCTAssertTrue(result.standardOutput.contains("on the loop before its end: 1000 of 1000"), result.standardOutput)
    }
}
