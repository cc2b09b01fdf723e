// DispatchMisuseRoles: the dispatch behaviours (SPEC §6) that need the process's main thread or its
// signal dispositions: sync onto the main queue from the main thread (a misuse ThreadKit stops,
// naming the call and the fix; exit status 0 means it went unnoticed), TKDispatch.main() serving
// the main queue, and signal sources catching SIGUSR1 and SIGTERM. The other dispatch misuses are
// exit tests (Tests/ThreadKitTests/DispatchMisuseTests.swift).
import ChildProcessRoles
import Glibc
import ThreadKit

enum DispatchMisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-sync-main-on-main", usage: "(sync onto the main queue from the main thread)") { _ in
            TKDispatchQueue.main.sync {}
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
        }
    ]
}
