// DispatchMisuseRoles: child processes that commit one dispatch misuse each (SPEC §6) and must be
// stopped by ThreadKit with a message naming the object, the call and the fix. Exit status 0 means
// the misuse went unnoticed, which the tests treat as a failure. dispatch-sync-current has a copy
// among the tour's children (Sources/threadkit/Tour/TourChildren.swift); DispatchMisuseTests judges
// this one.
import ChildProcessRoles
import Glibc
import ThreadKit

enum DispatchMisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-sync-target", usage: "(sync onto a queue whose target the caller runs on)") { _ in
            let parent = TKDispatchQueue(label: "parent")
            let child = TKDispatchQueue(label: "child", target: parent)
            let done = TKDispatchSemaphore(value: 0)
            parent.async {
                child.sync {}
                done.signal()
            }
            done.wait()
            return 0
        },
        ChildRole(name: "dispatch-sync-barrier-inside", usage: "(barrier sync onto the concurrent queue the caller runs on)") { _ in
            let queue = TKDispatchQueue(label: "store", attributes: .concurrent)
            let done = TKDispatchSemaphore(value: 0)
            queue.async {
                queue.sync(flags: .barrier) {}
                done.signal()
            }
            done.wait()
            return 0
        },
        ChildRole(name: "dispatch-sync-main-on-main", usage: "(sync onto the main queue from the main thread)") { _ in
            TKDispatchQueue.main.sync {}
            return 0
        },
        ChildRole(name: "dispatch-group-leave", usage: "(leave a group that was never entered)") { _ in
            let group = TKDispatchGroup()
            group.enter()
            group.leave()
            group.leave()
            return 0
        },
        ChildRole(name: "dispatch-over-resume", usage: "(resume a queue more times than it was suspended)") { _ in
            let queue = TKDispatchQueue(label: "uploads")
            queue.suspend()
            queue.resume()
            queue.resume()
            return 0
        },
        ChildRole(name: "dispatch-source-over-resume", usage: "(resume an active source that is not suspended)") { _ in
            let source = TKDispatchSource.makeUserDataAddSource(queue: .global())
            source.activate()
            source.resume()
            return 0
        },
        ChildRole(name: "dispatch-negative-semaphore", usage: "(create a semaphore with a negative value)") { _ in
            _ = TKDispatchSemaphore(value: -1)
            return 0
        },
        ChildRole(name: "dispatch-signal-source", usage: "(a signal source catches SIGUSR1 and SIGTERM; raise both; exit 0)") { _ in
            let usr1 = TKDispatchSource.makeSignalSource(signal: SIGUSR1, queue: .global())
            let term = TKDispatchSource.makeSignalSource(signal: SIGTERM, queue: .global())
            let got = TKDispatchSemaphore(value: 0)
            usr1.setEventHandler { got.signal() }
            term.setEventHandler { got.signal() }
            usr1.activate()
            term.activate()
            raise(SIGUSR1)
            kill(getpid(), SIGTERM)
            let ok = got.wait(until: .now + .seconds(20)) == .success && got.wait(until: .now + .seconds(20)) == .success
            Console.out(ok ? "caught SIGUSR1 and SIGTERM" : "a signal was not delivered")
            return ok ? 0 : 1
        },
    ]
}

enum DispatchMainRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-main", usage: "(TKDispatch.main() serves the main queue; the last item exits 0)") { _ in
            let group = TKDispatchGroup()
            let log = TKDispatchQueue(label: "log")
            let ranOnMain = TKAtomicInt32(0)
            for i in 1...3 {
                TKDispatchQueue.global().async(group: group) {
                    TKDispatchQueue.main.async {
                        if TKThread.isMainThread { ranOnMain.increment() }
                        log.sync { Console.out("main queue item \(i)") }
                    }
                }
            }
            group.notify(queue: .main) {
                // Items submitted before the notify have run (the main queue is FIFO)...
                TKDispatchQueue.main.asyncAfter(deadline: .now + .milliseconds(5)) {
                    Console.out("on main thread: \(ranOnMain.load())")
                    exit(ranOnMain.load() == 3 ? 0 : 1)
                }
            }
            TKDispatch.main()
        },
        ChildRole(name: "dispatch-main-off-main", usage: "(TKDispatch.main() called from another thread)") { _ in
            let t = TKThread { TKDispatch.main() }
            t.start()
            t.join()
            return 0
        },
    ]
}
