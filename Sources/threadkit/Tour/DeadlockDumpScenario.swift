// DeadlockDumpScenario: a deadlock explained while it happens (docs/Diagnostics.md §6). A child
// process (`threadkit tour --child deadlock lock-sync`, Sources/ChildProcessRoles/DeadlockRoles)
// records its waits; thread "left" holds TKLock "ledger" and calls `sync` on queue "store", while
// thread "right" runs "store" and asks for "ledger". The child's thread dump names the cycle, each
// thread with what it waits for and who holds it, the moment the second wait begins, as the JVM's
// thread dump does; the child then leaves with _exit, its two threads still stuck.
import ChildProcessRoles
import ThreadKit

enum DeadlockDumpScenario {
    static let scenario = Scenario(
        name: "deadlock-dump",
        title: "Who waits for whom: a deadlock of a lock and a queue's sync, named while it happens",
        source: "Threading Programming Guide, \"Avoiding Deadlocks and Livelocks\"; issue 26: \"thread A waits for X, "
            + "held by B; B waits for Y, held by A\", as the JVM's thread dump prints it"
    ) { say in
        say.say("child: TK_DIAGNOSTICS waits on; left: lock(ledger), then store.sync {}; right: store.sync { lock(ledger) }")
        let child = try ChildLauncher("deadlock", ["lock-sync"], captureStandardError: true)
        let (status, dump) = child.waitCapturingStandardError()
        let lines = dump.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        // The deadlock and the two threads' entries, without the stacks.
        for line in lines where !line.hasPrefix("      ") && !line.isEmpty { say.say("│ \(line)") }
        try say.check(status == 0, "the child did not name a deadlock (status \(status))")
        let edges = lines.filter { $0.hasPrefix("  thread ") }
        try say.check(edges.count == 2, "expected two edges, got \(edges.count)")
        try say.check(
            edges.contains { $0.contains("\"left\" waits in TKDispatchQueue.sync for TKDispatchQueue \"store\", run by thread") }
                && edges.contains { $0.contains("\"right\" waits in TKLock.lock() for TKLock \"ledger\", held by thread") },
            "the edges do not name both waits")
        return "the child named the cycle left → store (run by right) → ledger (held by left) as soon as both waited"
    }
}
