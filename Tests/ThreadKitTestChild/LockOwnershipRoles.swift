// LockOwnershipRoles: child processes that call a `…Locked` function, or touch the pool's
// scheduler, without the lock it needs. A debug build must stop them with a message naming the
// function, the lock and the fix (`DispatchLock.assertHeld`, `RawMutex.assertHeld`); exit status 0
// means the check is missing. Release builds have no owner check and so no such roles. Main thread
// only, except the thread that holds the lock in the `held-elsewhere` case.
import ChildProcessRoles

#if DEBUG
    @testable import ThreadKit

    enum LockOwnershipRoles {
        static let all: [ChildRole] = [
            ChildRole(
                name: "locked-without-lock",
                usage: "queue|held-elsewhere|run-loop|scheduler (a …Locked function or the pool's scheduler without its lock)"
            ) { args in
                switch args.first {
                case "queue":
                    // A DispatchLock nobody holds.
                    _ = TKDispatchQueue(label: "photos").planStartLocked()
                case "held-elsewhere":
                    // A DispatchLock that another thread holds (and keeps: the process stops first).
                    let queue = TKDispatchQueue(label: "photos")
                    let held = TKDispatchSemaphore(value: 0)
                    _ = SpawnedThread {
                        queue.lock.lock()
                        held.signal()
                        TKDispatchSemaphore(value: 0).wait()
                    }
                    held.wait()
                    _ = queue.planStartLocked()
                case "run-loop":
                    // A RawMutex nobody holds.
                    _ = TKRunLoop.current.isCommonLocked(.default)
                case "scheduler":
                    _ = DispatchPool.shared.scheduler.runQueues.nonEmpty
                default:
                    Console.out("usage: locked-without-lock queue|held-elsewhere|run-loop|scheduler")
                    return 2
                }
                return 0
            }
        ]
    }
#else
    enum LockOwnershipRoles {
        static let all: [ChildRole] = []
    }
#endif
