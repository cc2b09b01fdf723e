// SymbolicationRoles: one child role per report kind that prints where the report says the code
// was (docs/Diagnostics.md §7). DiagnosticsReleaseSymbolsTests runs them in a RELEASE build of this
// executable, where only `.symtab` and DWARF name the child's own functions: each role's call site
// is an `@inline(never)` function of this file, named `…InReleaseChild`, which the report must
// name. Each prints `CALL SITE: <the report's call-site line>` and then the whole report; exit 0
// when a report was made, 1 when none came within 30 s.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum SymbolicationRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "named-blocking", usage: "(a task waits for a held TKLock: the blocking report's call site)") { _ in
            namedBlocking()
        },
        ChildRole(name: "named-lock-order", usage: "(a two-lock inversion: each edge's call site)") { _ in namedLockOrder() },
        ChildRole(name: "named-hang", usage: "(a queue item spins 1 s past hangs:100ms: the hang report's call site)") { _ in
            namedHang()
        },
        ChildRole(name: "named-deadlock", usage: "(two threads deadlock on two locks: the dump's call sites)") { _ in
            namedDeadlock()
        },
        ChildRole(name: "named-contention", usage: "(a contended TKLock: the counters' call site of the longest wait)") { _ in
            namedContention()
        },
        ChildRole(name: "named-call-stack", usage: "(TKThread.callStackSymbols from a function of the child)") { _ in
            Console.out("CALL SITE: " + (callStackInReleaseChild().first { $0.contains("InReleaseChild") } ?? "(none)"))
            return 0
        },
    ]

    private static func namedBlocking() -> Int32 {
        TKDiagnostics.printsReports = false
        TKDiagnostics.enable(.blocking)
        let reported = TKDispatchSemaphore(value: 0)
        TKDiagnostics.setBlockingHandler { _ in reported.signal() }
        let lock = TKLock()
        let held = TKDispatchSemaphore(value: 0)
        let holder = SpawnedThread {
            lock.lock()
            held.signal()
            _ = reported.wait(until: .now + .seconds(30))
            lock.unlock()
        }
        held.wait()
        let done = TKDispatchSemaphore(value: 0)
        Task.detached {
            lockOnceInReleaseChild(lock)
            done.signal()
        }
        _ = done.wait(until: .now + .seconds(30))
        holder.join()
        guard let report = TKDiagnostics.blockingReports.first else { return 1 }
        Console.out("CALL SITE: \(report.callSite)")
        Console.out(report.description)
        return 0
    }

    private static func namedLockOrder() -> Int32 {
        TKDiagnostics.printsReports = false
        TKDiagnostics.enable(.lockOrder)
        let a = TKLock()
        let b = TKLock()
        a.name = "a"
        b.name = "b"
        SpawnedThread { takeAThenBInReleaseChild(a, b) }.join()
        SpawnedThread { takeBThenAInReleaseChild(a, b) }.join()
        guard let report = TKDiagnostics.lockOrderReports.first else { return 1 }
        for edge in report.edges { Console.out("CALL SITE: \(edge.callStack.first ?? "(no frames)")") }
        Console.out(report.description)
        return 0
    }

    private static func namedHang() -> Int32 {
        TKDiagnostics.printsReports = false
        TKDiagnostics.hangThreshold = .milliseconds(100)
        let reported = TKDispatchSemaphore(value: 0)
        let stop = TKDispatchSemaphore(value: 0) // the spinner's own: it and this thread never race for one signal
        TKDiagnostics.setHangHandler { _ in
            reported.signal()
            stop.signal()
        }
        TKDiagnostics.enable(.hangs)
        let queue = TKDispatchQueue(label: "spinner")
        queue.async { spinUntilReportedInReleaseChild(stop) }
        _ = reported.wait(until: .now + .seconds(30))
        queue.sync {}
        guard let report = TKDiagnostics.hangReports.first else { return 1 }
        Console.out("CALL SITE: \(report.callStack.first ?? "(no frames)")")
        Console.out(report.description)
        return 0
    }

    private static func namedDeadlock() -> Int32 {
        TKDiagnostics.enable(.waits)
        let left = TKLock()
        let right = TKLock()
        left.name = "left"
        right.name = "right"
        let bothHeld = TKDispatchGroup()
        bothHeld.enter()
        bothHeld.enter()
        _ = SpawnedThread { deadlockLeftInReleaseChild(left, right, bothHeld) }
        _ = SpawnedThread { deadlockRightInReleaseChild(left, right, bothHeld) }
        let deadline = ContinuousClock.now + .seconds(30)
        while TKDiagnostics.captureThreadDump(includingStacks: false).deadlocks.isEmpty {
            guard ContinuousClock.now < deadline else { return 1 }
            TKThread.sleep(for: .milliseconds(5))
        }
        let dump = TKDiagnostics.captureThreadDump()
        guard let deadlock = dump.deadlocks.first else { return 1 }
        for thread in deadlock.threads { Console.out("CALL SITE: \(thread.callStack.first ?? "(no frames)")") }
        Console.out(dump.description)
        exit(0) // the two threads stay deadlocked
    }

    private static func namedContention() -> Int32 {
        TKDiagnostics.enable([.contention, .waits])
        let lock = TKLock()
        lock.name = "contended"
        lock.lock()
        let waiter = SpawnedThread { lockOnceInReleaseChild(lock) }
        // Released once the waiter is in its wait (its record says so): the wait is counted.
        let deadline = ContinuousClock.now + .seconds(30)
        while !TKDiagnostics.captureThreadDump(includingStacks: false).threads.contains(where: { $0.wait != nil }) {
            guard ContinuousClock.now < deadline else { return 1 }
            TKThread.sleep(for: .milliseconds(2))
        }
        lock.unlock()
        waiter.join()
        guard let row = TKDiagnostics.contentionCounters.first(where: { $0.name == "TKLock \"contended\"" }) else { return 1 }
        Console.out("CALL SITE: \(row.maxWaitCallSite ?? "(none)")")
        Console.out(row.description)
        return 0
    }
}

/// The functions below are the frames the reports must name. Each adds its own constant: bodies
/// that differ are never merged into one function by the optimizer (two identical ones were, and a
/// report named the other's name).
let releaseChildMarks = Atomic<Int>(0)

/// Takes `first`, then (after both threads of `meeting`, when given, hold their first lock: a
/// deadlock) `second`, and lets both go. `@_transparent`: always inlined and, unlike
/// `@inline(__always)`, without an inlined frame of its own in the debug information, so a report
/// names the `…InReleaseChild` function that called it.
@_transparent
func takeInTurn(_ first: TKLock, _ second: TKLock, meeting: TKDispatchGroup? = nil, mark: Int) {
    releaseChildMarks.add(mark, ordering: .relaxed)
    first.lock()
    if let meeting {
        meeting.leave()
        meeting.wait()
    }
    second.lock()
    second.unlock()
    first.unlock()
}

/// The blocking role's task (blocked by a held lock) and the contention role's waiter.
@inline(never)
func lockOnceInReleaseChild(_ lock: TKLock) {
    releaseChildMarks.add(2, ordering: .relaxed)
    lock.lock()
    lock.unlock()
}

@inline(never)
func takeAThenBInReleaseChild(_ a: TKLock, _ b: TKLock) { takeInTurn(a, b, mark: 3) }

@inline(never)
func takeBThenAInReleaseChild(_ a: TKLock, _ b: TKLock) { takeInTurn(b, a, mark: 4) }

@inline(never)
func deadlockLeftInReleaseChild(_ left: TKLock, _ right: TKLock, _ meeting: TKDispatchGroup) {
    takeInTurn(left, right, meeting: meeting, mark: 6)
}

@inline(never)
func deadlockRightInReleaseChild(_ left: TKLock, _ right: TKLock, _ meeting: TKDispatchGroup) {
    takeInTurn(right, left, meeting: meeting, mark: 7)
}

@inline(never)
func spinUntilReportedInReleaseChild(_ reported: TKDispatchSemaphore) {
    releaseChildMarks.add(5, ordering: .relaxed)
    let end = ContinuousClock.now + .seconds(30)
    var spins = 0
    // Busy, as a long computation would be, until the watchdog has reported it (or 30 s).
    while ContinuousClock.now < end && reported.wait(until: .now) != .success { spins &+= 1 }
    if spins == -1 { print(spins) }
}

@inline(never)
func callStackInReleaseChild() -> [String] {
    releaseChildMarks.add(9, ordering: .relaxed)
    return TKThread.callStackSymbols
}
