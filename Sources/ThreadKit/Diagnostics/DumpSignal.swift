// DumpSignal: the Swift side of the thread dump on a signal (docs/Diagnostics.md §6,
// `TK_DIAGNOSTICS=dump:SIGUSR2`). The C side (CThreadKitDumpSignal.h) catches the signal with a
// handler that only wakes the dedicated `tk.dump` thread; that thread calls
// `tk_thread_dump_on_signal` below, which prints the dump on standard error (whatever
// `printsReports` says: the signal asked for it) and, with the flight recorder on, has it write
// its window too. Runs on the `tk.dump` thread only.
import CThreadKit
import Glibc

enum DumpSignal {
    /// The signal TK_DIAGNOSTICS named (`dump:SIGUSR2`), SIGUSR2 when it named none.
    static var configuredSignal: Int32 { DiagnosticsConfiguration.fromEnvironment.dumpSignal ?? SIGUSR2 }

    /// `TKDiagnostics.enable(.dumpOnSignal)`: installs the handler and the thread if the
    /// constructor did not (idempotent).
    static func install() { _ = tk_dump_signal_install(configuredSignal) }

    /// One request, on the `tk.dump` thread. Nothing when `.dumpOnSignal` was switched off.
    static func dumpRequested() {
        guard DiagnosticsSwitch.isOn(.dumpOnSignal) else { return }
        SystemCall.report(TKDiagnostics.threadDump())
        // The flight recorder's window too (FlightRecorder.swift, issue 26 item 3).
        if DiagnosticsSwitch.isOn(.flightRecorder) { FlightRecorder.dumpOnTrigger(reason: "the dump signal") }
    }
}

/// Called by the C dump thread (DumpSignal.c) for each request.
@_cdecl("tk_thread_dump_on_signal")
func tkThreadDumpOnSignal() {
    DumpSignal.dumpRequested()
}
