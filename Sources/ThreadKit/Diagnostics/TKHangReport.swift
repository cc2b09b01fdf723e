// TKHangReport: what the hang watchdog reports about one stuck activity (docs/Diagnostics.md §2).
// An immutable value; any thread.

/// A hang: an activity that ran past the threshold, with its thread's stack as sampled then.
public struct TKHangReport: Sendable, CustomStringConvertible {
    /// `thread TID "name"`.
    public let thread: String
    /// The kernel thread id of the stuck thread.
    public let threadID: UInt32
    /// What it was doing: `a work item of queue "label"`, `a run-loop pass in mode default`, …
    public let activity: String
    /// How long the activity had run when it was sampled.
    public let duration: Duration
    let addresses: [UInt]
    /// The thread dump taken with the report (docs/Diagnostics.md §6): every thread ThreadKit
    /// knows, what each waits for and who holds it, and any deadlock among them.
    public let threadDump: String

    /// The stuck thread's call stack, symbolized on demand (empty if the thread could not be
    /// sampled): the call site first — the innermost frame of the caller's code — then the frames
    /// above it, ThreadKit's own folded (`TKDiagnostics.foldsThreadKitFrames`; docs/Diagnostics.md §7).
    public var callStack: [String] { CallStack(addresses: addresses).lines }

    /// The report as the watchdog prints it: the thread, the activity and how long it has run,
    /// the call stack one frame a line, and the fix.
    public var description: String {
        var text = "ThreadKit hang: \(thread) has been running \(activity) for \(TKContentionCounters.format(duration)):\n"
        for frame in callStack { text += "      \(frame)\n" }
        text += "  Fix: move long or blocking work off this thread, or split it into shorter items."
        return threadDump.isEmpty ? text : text + "\n" + threadDump
    }
}
