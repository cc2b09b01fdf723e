// WaitGraphRoles: child processes for who waits for whom (docs/Diagnostics.md §6) that only the
// tests start (the deadlocks, shared with the tour, are in Sources/ChildProcessRoles/DeadlockRoles).
// Each sets up "holder" holding TKLock "ledger" and "waiter" waiting for it (no deadlock), waits on
// the wait graph itself (no sleeps), and ends with `_exit`: the holder never lets go.
//
// - wait-holder: prints the dump on standard output; 0 when the waiter's holder was named, 3 if not
//   within 30 s.
// - dump-signal-wait (run with TK_DIAGNOSTICS=dump:SIGUSR2): prints "ready" once the wait is
//   recorded, then reads standard input to its end (the test sends the signal meanwhile and reads
//   the dump from standard error); 0.
// - hang-holder: hangs:100ms; a work item of queue "store" waits for the lock; prints the first
//   hang report (with its thread dump) on standard output; 0, or 3 without a report in 30 s.
import ChildProcessRoles
import Glibc
import ThreadKit

enum WaitGraphRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "wait-holder", usage: "(a thread waits for a lock another holds; prints the dump)") { _ in
            TKDiagnostics.enable(.waits)
            holdAndWait()
            let named = waitForHolder()
            Console.out(TKDiagnostics.threadDump())
            _exit(named ? 0 : 3)
        },
        ChildRole(name: "dump-signal-wait", usage: "(TK_DIAGNOSTICS=dump:SIGUSR2; a lock wait, \"ready\", then read stdin to EOF)") { _ in
            holdAndWait()
            guard waitForHolder() else { _exit(3) }
            Console.out("ready")
            var byte: UInt8 = 0
            while true {
                let n = read(0, &byte, 1)
                if n == 0 || (n < 0 && errno != EINTR) { break }
            }
            _exit(0)
        },
        ChildRole(name: "hang-holder", usage: "(hangs:100ms; a work item waits for a held lock; prints the hang report)") { _ in
            TKDiagnostics.hangThreshold = .milliseconds(100)
            TKDiagnostics.printsReports = false
            let reports = SharedBox<[TKHangReport]>([])
            let guardLock = TKSpinLock() // guards `reports`
            TKDiagnostics.setHangHandler { report in guardLock.withLock { reports.value.append(report) } }
            TKDiagnostics.enable(.hangs)
            let ledger = TKLock()
            ledger.name = "ledger"
            let held = TKDispatchSemaphore(value: 0)
            TKThread(name: "holder") {
                ledger.lock()
                held.signal()
                while true { TKThread.sleep(for: .seconds(3600)) }
            }.start()
            held.wait()
            TKDispatchQueue(label: "store").async { ledger.lock() }
            let found = pollUntil(.now + .seconds(30)) { guardLock.withLock { !reports.value.isEmpty } }
            if let report = guardLock.withLock({ reports.value.first }) { Console.out(report.description) }
            _exit(found ? 0 : 3)
        },
    ]

    /// Starts "holder", which takes TKLock "ledger" and keeps it, then "waiter", which waits for it.
    private static func holdAndWait() {
        let ledger = TKLock()
        ledger.name = "ledger"
        let held = TKDispatchSemaphore(value: 0)
        let holder = TKThread(name: "holder") {
            ledger.lock()
            held.signal()
            while true { TKThread.sleep(for: .seconds(3600)) }
        }
        holder.start()
        held.wait()
        let waiter = TKThread(name: "waiter") { ledger.lock() }
        waiter.qualityOfService = .utility
        waiter.start()
    }

    /// Polls the wait graph (no stacks) until "waiter" waits for a lock "holder" holds, 30 s at most.
    private static func waitForHolder() -> Bool {
        pollUntil(.now + .seconds(30)) {
            let threads = TKDiagnostics.captureThreadDump(includingStacks: false).threads
            guard let holder = threads.first(where: { $0.name == "holder" }), let waiter = threads.first(where: { $0.name == "waiter" })
            else { return false }
            return waiter.wait?.holderThreadID == holder.threadID
        }
    }
}
