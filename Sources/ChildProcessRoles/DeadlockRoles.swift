// DeadlockRoles: two-thread deadlocks, each mixing two kinds of ThreadKit wait, that a thread dump
// names with the whole cycle (docs/Diagnostics.md §6). `deadlock KIND` (the tour's deadlock-dump
// scenario and DiagnosticsWaitGraphTests) switches wait recording on, builds the deadlock, polls
// the wait graph (no stacks, no signals) until it holds a cycle or 30 s pass, then writes the full
// thread dump on standard error and `    (child: N deadlock(s) named)` on standard output, and ends
// the process with `_exit` (its threads stay deadlocked): status 0 when a deadlock was named, 3
// when none was within the deadline, 2 for an unknown KIND.
//
// Every kind has two threads; each takes its first resource, says so on a semaphore, waits for the
// other's, then asks for the other's resource: the second waits close the cycle whatever the
// interleaving. The deadline is only a bound on a broken build; a working one names the cycle as
// soon as the second wait is recorded.
import Glibc
import ThreadKit

package enum DeadlockRoles {
    /// The kinds, each two kinds of wait.
    package static let kinds = ["lock-sync", "sync-join", "operation-lock", "perform-lock", "sync-sync"]

    package static let all: [ChildRole] = [
        ChildRole(name: "deadlock", usage: "KIND (\(kinds.joined(separator: ", ")): deadlock two threads, print the dump)") { args in
            guard let kind = args.first, kinds.contains(kind) else { return 2 }
            TKDiagnostics.disable(.lockOrder) // the dump alone on standard error (§1 would predict it too)
            TKDiagnostics.enable(.waits)
            build(kind)
            let deadline = ContinuousClock.now + .seconds(30)
            let found = pollUntil(deadline) { !TKDiagnostics.captureThreadDump(includingStacks: false).deadlocks.isEmpty }
            let dump = TKDiagnostics.captureThreadDump()
            Console.err(dump.description)
            Console.out("    (child: \(dump.deadlocks.count) deadlock(s) named)")
            _exit(found && !dump.deadlocks.isEmpty ? 0 : 3)
        }
    ]

    /// Starts the two threads of `kind`; they deadlock on their own.
    private static func build(_ kind: String) {
        let leftHolds = TKDispatchSemaphore(value: 0)
        let rightHolds = TKDispatchSemaphore(value: 0)
        let ledger = TKLock()
        ledger.name = "ledger"
        let store = TKDispatchQueue(label: "store")
        switch kind {
        case "lock-sync":
            // left holds the lock and syncs onto the queue; right runs the queue and locks.
            start("left") {
                ledger.lock()
                leftHolds.signal()
                rightHolds.wait()
                store.sync {}
            }
            start("right") {
                store.sync {
                    rightHolds.signal()
                    leftHolds.wait()
                    ledger.lock()
                }
            }
        case "sync-join":
            // left runs the queue and joins right; right syncs onto the queue.
            let right = TKThread(name: "right") {
                leftHolds.wait()
                store.sync {}
            }
            start("left") {
                store.sync {
                    leftHolds.signal()
                    right.join()
                }
            }
            right.start()
        case "operation-lock":
            // left holds the lock and waits for the operation, which locks.
            let operations = TKOperationQueue()
            operations.name = "postings"
            let post = TKBlockOperation {
                rightHolds.signal()
                ledger.lock()
            }
            post.name = "post entry"
            start("left") {
                ledger.lock()
                operations.addOperation(post)
                rightHolds.wait()
                post.waitUntilFinished()
            }
        case "perform-lock":
            // left holds the lock and performs on right, waiting; right locks instead of running
            // its loop.
            let right = start("right") {
                leftHolds.wait()
                ledger.lock()
            }
            start("left") {
                ledger.lock()
                leftHolds.signal()
                try? right.perform(waitUntilDone: true) {}
            }
        default: // "sync-sync"
            // left runs "accounts" and syncs onto "audit"; right the other way round.
            let accounts = TKDispatchQueue(label: "accounts")
            let audit = TKDispatchQueue(label: "audit")
            start("left") {
                accounts.sync {
                    leftHolds.signal()
                    rightHolds.wait()
                    audit.sync {}
                }
            }
            start("right") {
                audit.sync {
                    rightHolds.signal()
                    leftHolds.wait()
                    accounts.sync {}
                }
            }
        }
    }

    @discardableResult
    private static func start(_ name: String, _ body: @escaping @Sendable () -> Void) -> TKThread {
        let thread = TKThread(name: name, block: body)
        thread.qualityOfService = name == "left" ? .default : .utility
        thread.start()
        return thread
    }
}
