// TourChildren: the tour's own child processes, `threadkit tour --child ROLE ARGUMENT...` (hidden:
// not in `threadkit --help`), started by ChildLauncher from the scenarios that need a second
// process or a process that ends. Each role prints what it did on standard output.
//
// Layout (issue 27): the shipped CLI keeps only what the tour runs. The tests' children live in
// Tests/ThreadKitTestChild (`ThreadKitTestChild ROLE`), a test-only executable; the PostgreSQL
// scenario and its child in `threadkit-postgres` (Sources/threadkit-postgres). The roles both the
// tour and the tests start are in Sources/ChildProcessRoles (SharedChildRoles), which both link.
// detached-pitfall and dispatch-sync-current (gcd-sync-deadlock; the tests check that misuse in
// an exit test, DispatchMisuseTests) are the tour's only. custom-source-demo is here because its body is the tour's
// CustomSourceDemo: RunLoopTests starts it through this command
// (`threadkit tour --child custom-source-demo ROUNDS INTERVAL_MS`).
// Threads: each role runs on the child's main thread, which owns its main run loop.
import ChildProcessRoles
import Glibc
import ThreadKit

enum TourChildren {
    static func main(_ arguments: [String]) -> Int32 {
        ChildRole.main(roles, arguments, header: "threadkit tour --child: the tour's child processes (started by the tour itself) are:")
    }

    static let roles: [ChildRole] =
        [
            ChildRole(name: "detached-pitfall", usage: "PATH (main returns while a detached thread is still writing PATH)") { args in
                guard let path = args.first else { return 2 }
                let started = TKCondition()
                let running = SharedBox(false) // guarded by started
                TKThread.detachNewThread(name: "saver") {
                    started.withLock {
                        running.value = true
                        started.signal()
                    }
                    SharedChildRoles.writeSlowly(path, chunks: 20)
                }
                started.withLock { while !running.value { started.wait() } }
                Console.out("    (child: main returns while the detached saver writes)")
                return 0 // the detached thread is not waited for: its file stays incomplete
            },
            ChildRole(
                name: "dispatch-sync-current", usage: "(sync onto the serial queue the caller runs on: ThreadKit stops the process)"
            ) { _ in
                let queue = TKDispatchQueue(label: "photos")
                queue.sync { queue.sync {} }
                return 0
            },
            ChildRole(
                name: "custom-source-demo",
                usage: "ROUNDS INTERVAL_MS (the seed's two-source demo on the main loop; prints one line per event)"
            ) { args in
                guard args.count == 2, let rounds = Int(args[0]), let ms = Int(args[1]), rounds > 0, ms >= 0 else { return 2 }
                let demo = CustomSourceDemo(rounds: rounds, interval: .milliseconds(ms)) { _ in }
                let (events, exit) = demo.run()
                for event in events {
                    let what = String(event.what.map { $0 == " " ? "-" : $0 })
                    Console.out("event \(what) round=\(event.round) main=\(event.onMain) at_us=\(Int(event.at / .microseconds(1)))")
                }
                Console.out("exit \(exit.map { "\($0)" } ?? "none")")
                return 0
            },
        ] + SharedChildRoles.all + DeadlockRoles.all
}
