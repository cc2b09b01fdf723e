// TaskExecutorRoles: child processes for a run loop as a task executor (TaskExecutorTests): a
// task's preference for a loop whose thread has ended is only a preference, so its jobs run on the
// global concurrent executor and a warning says so once per loop (an actor's isolation to the
// loop stays a misuse: ExecutorMisuseRoles). Each prints what ran and exits 0 when every task
// finished, 3 when some did not within 60 s.
//   task-executor-finished-loop         a task preferring the loop of a finished thread
//   task-executor-thread-ends-with-job  a thread ends with 500 tasks' jobs queued on its loop
//                                       (made there, the loop never run)
//   task-executor-loop-ends-under-tasks 1,000 tasks run on a loop (withTaskExecutorPreference),
//                                       wait there for a gate, the loop's thread ends, the gate
//                                       opens: each task goes on (a nonisolated call and a
//                                       Task.yield, whose job is no task's, both back through
//                                       the loop) and finishes
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum TaskExecutorRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "task-executor-finished-loop", usage: "(a task preferring the loop of a finished thread)") { _ in
            let box = SharedBox<TKRunLoop?>(nil)
            var thread: TKThread? = TKThread(name: "finished-loop") { box.value = TKRunLoop.current }
            thread?.isDetached = false
            thread?.start()
            thread?.join() // publishes box.value
            thread = nil
            let done = TKDispatchSemaphore(value: 0)
            Task(executorPreference: box.value!) { done.signal() }
            guard done.wait(until: .now + .seconds(60)) == .success else {
                Console.out("the task never ran")
                return 3
            }
            Console.out("task finished")
            return 0
        },
        ChildRole(
            name: "task-executor-thread-ends-with-job", usage: "(a thread ends with 500 tasks' jobs queued on its loop)"
        ) { _ in
            let tasks = 500
            let done = TKDispatchSemaphore(value: 0)
            let thread = TKThread(name: "ending-loop") {
                // Enqueued on this loop before Task.init returns; the loop never runs.
                for _ in 0..<tasks { Task(executorPreference: TKRunLoop.current) { done.signal() } }
            }
            thread.start()
            for finished in 0..<tasks where done.wait(until: .now + .seconds(60)) != .success {
                Console.out("\(finished) of \(tasks) tasks finished")
                return 3
            }
            Console.out("\(tasks) of \(tasks) tasks finished")
            return 0
        },
        ChildRole(
            name: "task-executor-loop-ends-under-tasks", usage: "(1,000 tasks on a loop whose thread ends under them)"
        ) { _ in
            let tasks = 1_000
            let gate = Gate()
            let stop = Atomic<Bool>(false)
            let box = SharedBox<(loop: TKRunLoop, thread: pthread_t)?>(nil)
            let ready = TKDispatchSemaphore(value: 0)
            let thread = TKThread(name: "short-loop") {
                box.value = (TKRunLoop.current, pthread_self())
                ready.signal()
                while !stop.load(ordering: .relaxed) {
                    _ = TKRunLoop.current.run(mode: .default, before: .now + .milliseconds(20))
                }
            }
            thread.isDetached = false
            thread.start()
            ready.wait()
            guard let (loop, loopThread) = box.value else { return 2 }
            let counts = Tally()
            let finished = TKDispatchSemaphore(value: 0)
            for _ in 0..<tasks {
                Task {
                    await withTaskExecutorPreference(loop) {
                        await Task.yield() // on the live loop
                        counts.started(onLoop: pthread_equal(pthread_self(), loopThread) != 0)
                        await gate.pass()
                        // A call and return, and a yield (whose job, no task's, comes through the
                        // loop's SerialExecutor enqueue, as Task.currentExecutor is the loop).
                        _ = await nonisolatedSteps(3)
                        await Task.yield()
                        counts.finished(offLoop: pthread_equal(pthread_self(), loopThread) == 0)
                    }
                    finished.signal()
                }
            }
            let deadline = ContinuousClock.now + .seconds(60)
            while gate.waiting < tasks && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(5)) }
            guard gate.waiting == tasks else {
                Console.out("only \(gate.waiting) of \(tasks) tasks reached the gate")
                return 3
            }
            stop.store(true, ordering: .relaxed)
            thread.join() // the loop's thread has ended: every later enqueue on the loop is refused
            gate.open() // resumes each task: an enqueue on the loop
            for _ in 0..<tasks where finished.wait(until: .now + .seconds(60)) != .success { break }
            let c = counts.snapshot
            Console.out("on the loop before its end: \(c.onLoop) of \(tasks)")
            Console.out("finished: \(c.finished) of \(tasks), \(c.offLoop) off the loop's thread")
            return c.finished == tasks ? 0 : 3
        },
    ]
}

/// `n` nested nonisolated async calls; returns `n`.
@inline(never)
private func nonisolatedSteps(_ n: Int) async -> Int {
    n == 0 ? 0 : await nonisolatedSteps(n - 1) + 1
}

/// What the tasks saw, under a mutex.
/// Counts kept under a TKLock: ThreadSanitizer sees its futex, not Synchronization.Mutex's lock
/// path (a Mutex here was reported as a race when this role ran under TSan).
private final class Locked<Value>: @unchecked Sendable {
    // safety: `value` is read and written only inside `withLock`, under `lock`.
    private let lock = TKLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

private final class Tally: Sendable {
    private let state = Locked((onLoop: 0, finished: 0, offLoop: 0))
    func started(onLoop: Bool) { state.withLock { $0.onLoop += onLoop ? 1 : 0 } }
    func finished(offLoop: Bool) {
        state.withLock {
            $0.finished += 1
            $0.offLoop += offLoop ? 1 : 0
        }
    }
    var snapshot: (onLoop: Int, finished: Int, offLoop: Int) { state.withLock { $0 } }
}

/// Tasks wait in `pass()` until `open()` resumes them all (from the thread that calls it).
private final class Gate: Sendable {
    private let state = Locked<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    var waiting: Int { state.withLock { $0.waiters.count } }

    func pass() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiters.removeAll() }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
