// BlockingRoles: child processes for the blocking checker (docs/Diagnostics.md §5): the main
// thread's run loop blocked in a timer callback (only a child can run TKRunLoop.main: XCTest owns
// the test process's main thread). `blocking:fatal` is an exit test (DiagnosticsBlockingTests).
import ChildProcessRoles
import Glibc
import ThreadKit

enum BlockingRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "blocking-main-loop",
            usage: "(blocking; a TKRunLoop.main timer callback waits for a lock another thread holds; prints the reports)"
        ) { _ in
            TKDiagnostics.enable(.blocking)
            let lock = TKLock()
            let reported = TKDispatchSemaphore(value: 0)
            // Runs on the main thread before its wait parks; signalling never blocks.
            TKDiagnostics.setBlockingHandler { _ in reported.signal() }
            let holding = TKDispatchSemaphore(value: 0)
            let holder = SpawnedThread {
                lock.lock()
                holding.signal()
                _ = reported.wait(until: .now + .seconds(20)) // a plain thread: its own wait is not reported
                lock.unlock()
            }
            holding.wait() // the main thread, its loop not running yet: not reported either
            let timer = TKTimer(interval: .milliseconds(1), repeats: false) { _ in
                blockTheMainLoopOnALock(lock)
                TKRunLoop.main.stop()
            }
            TKRunLoop.main.add(timer, forMode: .default)
            TKRunLoop.main.run(mode: .default, before: .now + .seconds(30))
            holder.join()
            let reports = TKDiagnostics.blockingReports
            Console.out("blocking reports: \(reports.count)")
            for report in reports { Console.out("place \(report.place) site \(report.callSite)") }
            return reports.count == 1 && reports[0].place == .mainRunLoop ? 0 : 1
        }
    ]
}

/// The call site the main-loop report must name.
@inline(never)
func blockTheMainLoopOnALock(_ lock: TKLock) {
    lock.lock()
    lock.unlock()
}
