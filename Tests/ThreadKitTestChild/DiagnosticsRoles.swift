// DiagnosticsRoles: child processes for the diagnostics (docs/Diagnostics.md): TK_DIAGNOSTICS
// parsing (and that a refused `dump:SIGTERM` leaves the signal alone: `signal-self`), and a hang
// of the main thread's run loop (which only a child can show: XCTest owns the test process's main
// thread). `lockorder:fatal` is an exit test (DiagnosticsLockOrderTests).
import ChildProcessRoles
import Glibc
import ThreadKit

enum DiagnosticsRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "diagnostics-config", usage: "(prints the features and hang threshold TK_DIAGNOSTICS gave)") { _ in
            Console.out(TKDiagnostics.summary)
            Console.out(
                "threshold-ns \(TKDiagnostics.hangThreshold.components.seconds * 1_000_000_000 + TKDiagnostics.hangThreshold.components.attoseconds / 1_000_000_000)"
            )
            return 0
        },
        ChildRole(name: "signal-self", usage: "SIGNO (sends itself SIGNO; prints \"survived\" and exits 3 if alive 10 s later)") {
            arguments in
            guard let signo = arguments.first.flatMap({ Int32($0) }) else { return 2 }
            kill(getpid(), signo)
            // A caught signal (a thread dump) lets the process go on: sleep out the rest, however
            // often a signal cuts a sleep short.
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(100)) }
            Console.out("survived")
            return 3
        },
        ChildRole(name: "main-loop-hang", usage: "(hangs:100ms; a main-loop timer callback that runs 600 ms; prints the hang)") { _ in
            TKDiagnostics.hangThreshold = .milliseconds(100)
            TKDiagnostics.enable(.hangs)
            let loop = TKRunLoop.main
            let timer = TKTimer(interval: .milliseconds(1), repeats: false) { _ in
                stallTheMainLoop()
                TKRunLoop.main.stop()
            }
            loop.add(timer, forMode: .default)
            loop.run(mode: .default, before: .now + .seconds(5))
            let reports = TKDiagnostics.hangReports
            Console.out("hang reports: \(reports.count)")
            for report in reports { Console.out("tid \(report.threadID) main \(report.threadID == UInt32(getpid()))") }
            return reports.isEmpty ? 1 : 0
        },
    ]
}

/// Runs without reaching a wait (busy, as a long computation on the main thread would) for 600 ms
/// and until the watchdog has reported it (at most 60 s): on a loaded machine the watchdog's
/// thread may not run within the 600 ms.
@inline(never)
func stallTheMainLoop() {
    let start = ContinuousClock.now
    var spins = 0
    while ContinuousClock.now - start < .milliseconds(600)
        || (TKDiagnostics.hangReports.isEmpty && ContinuousClock.now - start < .seconds(60))
    {
        spins &+= 1
    }
    if spins == -1 { Console.out("") }
}
