// TaskExecutorRoles: child processes for a run loop as a task executor (TaskExecutorTests): the
// misuses that must stop the process, as for an actor on the loop (ExecutorMisuseRoles).
//   task-executor-finished-loop         a task preferring the loop of a finished thread: the
//                                       enqueue stops the process (exits 3 if the task neither
//                                       ran nor stopped it within 20 s)
//   task-executor-thread-ends-with-job  a thread ends with a task's job queued on its loop (made
//                                       there, the loop never run): its end stops the process
//                                       (exits 3 likewise)
import ChildProcessRoles
import ThreadKit

enum TaskExecutorRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "task-executor-finished-loop", usage: "(a task preferring the loop of a finished thread: misuse)") { _ in
            let box = SharedBox<TKRunLoop?>(nil)
            var thread: TKThread? = TKThread(name: "finished-loop") { box.value = TKRunLoop.current }
            thread?.isDetached = false
            thread?.start()
            thread?.join() // publishes box.value
            thread = nil
            let done = TKDispatchSemaphore(value: 0)
            Task(executorPreference: box.value!) { done.signal() }
            guard done.wait(until: .now + .seconds(20)) == .success else {
                Console.out("the task never ran")
                return 3
            }
            Console.out("task finished")
            return 0
        },
        ChildRole(
            name: "task-executor-thread-ends-with-job", usage: "(a thread ends with a task's job queued on its loop: misuse)"
        ) { _ in
            let done = TKDispatchSemaphore(value: 0)
            let thread = TKThread(name: "ending-loop") {
                // Enqueued on this loop before Task.init returns; the loop never runs.
                Task(executorPreference: TKRunLoop.current) { done.signal() }
            }
            thread.start()
            guard done.wait(until: .now + .seconds(20)) == .success else {
                Console.out("the task never ran")
                return 3
            }
            Console.out("task finished")
            return 0
        },
    ]
}
