// DiagnosticsScenarios: the seeds' two-lock deadlock, predicted and named before it can happen
// (docs/Diagnostics.md §1). Thread A takes "accounts" then "audit log"; later thread B takes them
// the other way round. The threads never overlap, so nothing deadlocks, yet the order graph now
// has a cycle, and the lock-order checker reports it at B's second acquisition.
import ChildProcessRoles
import Synchronization
import ThreadKit

enum DiagnosticsScenarios {
    static let all: [Scenario] = [lockOrder, blocking, DeadlockDumpScenario.scenario]

    static let lockOrder = Scenario(
        name: "lock-order", title: "Lock-order checking: the two-lock deadlock, predicted and named before it happens",
        source: "Threading Programming Guide, \"Avoiding Deadlocks and Livelocks\": two threads each hold a lock the other needs; "
            + "CSDN article: 线程A和线程B各持有一把锁, each waiting for the other"
    ) { say in
        let wasOn = TKDiagnostics.features
        let printed = TKDiagnostics.printsReports
        TKDiagnostics.enable(.lockOrder)
        TKDiagnostics.printsReports = false
        let reports = SharedBox<[TKLockOrderReport]>([])
        let reportsLock = TKSpinLock() // guards `reports`; not nested with the scenario's locks
        TKDiagnostics.setLockOrderHandler { report in
            reportsLock.lock()
            reports.value.append(report)
            reportsLock.unlock()
        }
        defer {
            TKDiagnostics.setLockOrderHandler(nil)
            TKDiagnostics.printsReports = printed
            if !wasOn.contains(.lockOrder) { TKDiagnostics.disable(.lockOrder) }
        }
        let accounts = TKLock()
        let auditLog = TKLock()
        accounts.name = "accounts"
        auditLog.name = "audit log"

        say.say("thread A: lock(accounts), lock(audit log) — transfer, then write the log entry")
        SpawnedThread { DiagnosticsScenarios.transferThenLog(accounts, auditLog) }.join()
        say.say("thread A done; no report: one order alone cannot deadlock")
        let afterA = reportsLock.withLock { reports.value.count }

        say.say("thread B (later, alone): lock(audit log), lock(accounts) — the opposite order")
        SpawnedThread { DiagnosticsScenarios.auditThenAdjust(auditLog, accounts) }.join()
        say.say(
            "thread B done: it never waited, nothing deadlocked — but had A and B run together, each could hold one lock and wait for the other"
        )

        let found = reportsLock.withLock { reports.value }
        for line in (found.first?.description ?? "(no report)").split(separator: "\n").prefix(12) { say.say("│ \(line)") }
        try say.check(afterA == 0, "a consistent order was reported")
        try say.check(found.count == 1, "expected one report, got \(found.count)")
        let names = found[0].locks.joined(separator: " ")
        try say.check(names.contains("\"accounts\"") && names.contains("\"audit log\""), "the report does not name both locks: \(names)")
        try say.check(found[0].edges.count == 2, "the cycle should have two edges")
        // Each edge's call site is the function that took the locks, in a release build too
        // (docs/Diagnostics.md §7).
        let sites = found[0].edges.map { $0.callStack.first ?? "" }
        try say.check(sites[0].contains("auditThenAdjust"), "the closing edge's call site is not auditThenAdjust: \(sites[0])")
        try say.check(sites[1].contains("transferThenLog"), "the earlier edge's call site is not transferThenLog: \(sites[1])")
        return "the cycle accounts → audit log → accounts was reported at thread B's second lock(), before any deadlock"
    }

    /// Thread A's work: the transfer under `accounts`, then its log entry under `auditLog`.
    @inline(never)
    static func transferThenLog(_ accounts: TKLock, _ auditLog: TKLock) {
        accounts.lock()
        auditLog.lock()
        transfers.add(1, ordering: .relaxed)
        auditLog.unlock()
        accounts.unlock()
    }

    /// What each function counts: their bodies differ, so an optimized build does not merge the
    /// two into one function (which a report would then name for both).
    static let transfers = Atomic<Int>(0)
    static let audits = Atomic<Int>(0)

    /// Thread B's work: an audit under `auditLog` that adjusts a balance under `accounts`.
    @inline(never)
    static func auditThenAdjust(_ auditLog: TKLock, _ accounts: TKLock) {
        auditLog.lock()
        accounts.lock()
        audits.add(1, ordering: .relaxed)
        accounts.unlock()
        auditLog.unlock()
    }
}
