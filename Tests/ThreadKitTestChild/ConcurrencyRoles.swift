// ConcurrencyRoles: child processes for docs/Concurrency.md, whose subject is the process's main
// thread (XCTest owns the test process's main thread, so these run in a child of their own).
//   main-thread-mix N   three submitter threads each send N items through each of the three paths
//                       to the main thread (TKDispatchQueue.main, Dispatch's main queue, the main
//                       actor) while the main thread runs TKRunLoop.main; prints the verdicts.
import ChildProcessRoles
import Dispatch
import Glibc
import Synchronization
import ThreadKit

enum ConcurrencyRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "main-thread-mix", usage: "N (three paths to the main thread under TKRunLoop.main)") { args in
            mainThreadMix(perPath: args.first.flatMap(Int.init) ?? 1_000)
        }
    ]

    /// One record per item: (submitter, path, sequence within that submitter's path, or within
    /// the shared Dispatch FIFO for paths 1 and 2). Written on the main thread only.
    private final class Ledger: @unchecked Sendable {
        var records: [(submitter: Int, path: Int, seq: Int, fifo: Int)] = []
        var offMain = 0
        var expected = 0
    }

    private static func mainThreadMix(perPath: Int) -> Int32 {
        let ledger = Ledger()
        let submitters = 3
        ledger.expected = submitters * perPath * 3
        @Sendable func record(_ submitter: Int, _ path: Int, _ seq: Int, _ fifo: Int) {
            if !TKThread.isMainThread { ledger.offMain += 1 }
            ledger.records.append((submitter, path, seq, fifo))
            if ledger.records.count == ledger.expected { TKRunLoop.main.stop() }
        }
        // A timer callout on the main loop: the main actor's isolation holds there.
        let assumed = TKAtomicInt32(0)
        TKRunLoop.main.add(
            TKTimer(fireAt: .now, interval: .zero, repeats: false) { _ in
                MainActor.assumeIsolated { assumed.store(1) }
            }, forMode: .default)
        // Work queued before the main loop ever ran is served too (and first: one FIFO).
        let early = TKAtomicInt32(0)
        DispatchQueue.main.async { early.increment() }
        Task { @MainActor in early.increment() }
        var threads: [TKThread] = []
        for s in 0..<submitters {
            let t = TKThread {
                var fifo = 0
                for i in 0..<perPath {
                    TKDispatchQueue.main.async { record(s, 0, i, -1) }
                    let f1 = fifo
                    let f2 = fifo + 1
                    fifo += 2
                    DispatchQueue.main.async { record(s, 1, i, f1) }
                    Task { @MainActor in record(s, 2, i, f2) }
                }
            }
            t.start()
            threads.append(t)
        }
        TKRunLoop.main.run()
        for t in threads { t.join() }
        Console.out("work queued before the loop first ran: \(early.load()) of 2")
        var ordered = true
        var fifoKept = true
        for s in 0..<submitters {
            for p in 0..<3 {
                let seqs = ledger.records.filter { $0.submitter == s && $0.path == p }.map(\.seq)
                if seqs != Array(0..<perPath) { ordered = false }
            }
            let shared = ledger.records.filter { $0.submitter == s && $0.path != 0 }.map(\.fifo)
            if shared != Array(0..<(2 * perPath)) { fifoKept = false }
        }
        Console.out("ran \(ledger.records.count) of \(ledger.expected) items; off the main thread: \(ledger.offMain)")
        Console.out("per submitter and path in order: \(ordered)")
        Console.out("Dispatch main queue + main actor one FIFO per submitter: \(fifoKept)")
        Console.out("MainActor.assumeIsolated in a TKRunLoop.main callout: \(assumed.load() == 1)")
        return ledger.records.count == ledger.expected && ledger.offMain == 0 && ordered && fifoKept && assumed.load() == 1
            && early.load() == 2 ? 0 : 1
    }
}

// MARK: The pool as the global executor
// (global-executor and global-executor-too-late, which the tour also runs, are in
// Sources/ChildProcessRoles, SharedChildRoles.)

// MARK: Executor stall

// The executor misuses (a concurrent queue as an actor's executor, a job for a finished thread's
// loop or left on its loop when the thread ends, assumeIsolated off the loop) are exit tests in
// Tests/ThreadKitTests/ExecutorTests.swift. What stays here sets TK_EXECUTOR_STALL_MS before the
// process's first job.

enum ExecutorMisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "executor-stalled-loop", usage: "(an actor call waits on a loop nobody runs: a warning, then exit 0)") { _ in
            // Asked for before the first job: the delay is read once.
            setenv("TK_EXECUTOR_STALL_MS", "100", 1)
            let box = SharedBox<TKRunLoop?>(nil)
            let ready = TKDispatchSemaphore(value: 0)
            let release = TKDispatchSemaphore(value: 0)
            let thread = TKThread(name: "idle-loop") {
                box.value = TKRunLoop.current
                ready.signal()
                release.wait() // never runs its loop
            }
            thread.start()
            ready.wait()
            let counter = PinnedCounter(box.value!.asUnownedSerialExecutor())
            Task { _ = await counter.increment() }
            TKThread.sleep(for: .seconds(2)) // the warning is due after 100 ms
            return 0
        }
    ]
}
