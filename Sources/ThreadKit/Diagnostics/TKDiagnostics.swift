// TKDiagnostics: the public face of the diagnostics (docs/Diagnostics.md): switch features on and
// off at run time, receive lock-order and hang reports, read the contention counters, print a
// summary. Thread-safe: the switch word is changed under `DiagnosticsState.mutex` (so concurrent
// enable/disable calls do not lose each other's bits); handlers and stored reports live there too.

/// Lock-order checking, hang reports and contention counters (and the trace recorder). Features
/// start as TK_DIAGNOSTICS says (`lockorder`, `lockorder:fatal`, `hangs:250ms`, `contention`,
/// `trace`, `all`, `off`; debug builds check lock order unless told `off`), and can be switched
/// here at any time.
public enum TKDiagnostics {
    /// The features on now.
    public static var features: TKDiagnosticsFeature { DiagnosticsSwitch.current }

    /// Switches `features` on (in addition to those on).
    public static func enable(_ features: TKDiagnosticsFeature) {
        let (before, after) = DiagnosticsState.shared.change { $0.union(features) }
        if !before.contains(.lockOrder) && after.contains(.lockOrder) { LockOrder.didSwitchOn() }
        if after.contains(.hangs) { HangWatchdog.shared.startIfNeeded() }
        if after.contains(.dumpOnSignal) { DumpSignal.install() } // §6: the handler and its thread
    }

    /// Switches `features` off. Turning `.lockOrder` off also turns `.lockOrderFatal` off, and
    /// `.blocking` `.blockingFatal`.
    public static func disable(_ features: TKDiagnosticsFeature) {
        var off = features
        if off.contains(.lockOrder) { off.insert(.lockOrderFatal) }
        if off.contains(.blocking) { off.insert(.blockingFatal) }
        let (before, after) = DiagnosticsState.shared.change { $0.subtracting(off) }
        if before.contains(.hangs) && !after.contains(.hangs) { HangWatchdog.shared.stop() }
    }

    /// How long a run-loop pass, dispatch work item or operation may run before a hang is reported
    /// (TK_DIAGNOSTICS `hangs:250ms`; 250 ms by default).
    public static var hangThreshold: Duration {
        get { HangWatchdog.shared.currentThreshold }
        set {
            if newValue <= .zero {
                misuse("TKDiagnostics.hangThreshold set to \(newValue). Fix: give a positive duration, such as .milliseconds(250).")
            }
            HangWatchdog.shared.currentThreshold = newValue
        }
    }

    /// Whether reports are also printed on standard error (the default).
    public static var printsReports: Bool {
        get { DiagnosticsState.shared.read { $0.prints } }
        set { DiagnosticsState.shared.update { $0.prints = newValue } }
    }

    /// Called with each lock-order cycle, once per cycle, on the thread whose acquisition closed it
    /// (which may hold locks: do not take ThreadKit locks in the handler). nil removes it.
    public static func setLockOrderHandler(_ handler: (@Sendable (TKLockOrderReport) -> Void)?) {
        DiagnosticsState.shared.update { $0.lockOrderHandler = handler }
    }

    /// Called with each hang, once per stuck activity, on the watchdog thread. nil removes it.
    public static func setHangHandler(_ handler: (@Sendable (TKHangReport) -> Void)?) {
        DiagnosticsState.shared.update { $0.hangHandler = handler }
    }

    /// Called with each blocking wait made in the wrong place (a Swift concurrency job, the main
    /// thread while its run loop runs, a loop thread an actor is pinned to), once per call site, on
    /// the thread that blocked (or the pool's monitor thread), before it waits. nil removes it.
    public static func setBlockingHandler(_ handler: (@Sendable (TKBlockingReport) -> Void)?) {
        BlockingChecker.setHandler(handler)
    }

    /// Every blocking wait in the wrong place reported so far (the last 100), one per call site.
    public static var blockingReports: [TKBlockingReport] { BlockingChecker.reports }

    /// Every lock-order cycle reported so far.
    public static var lockOrderReports: [TKLockOrderReport] { LockOrderGraph.shared.allReports }

    /// Every hang reported so far (the last 100).
    public static var hangReports: [TKHangReport] { DiagnosticsState.shared.read { $0.hangs } }

    /// The contention counters, one per named lock (unnamed locks share one per kind) and per
    /// queue, most waiting first. Counted only while `.contention` is on.
    public static var contentionCounters: [TKContentionCounters] { Contention.shared.snapshot }

    /// Zeroes the contention counters.
    public static func resetContentionCounters() { Contention.shared.reset() }

    /// Forgets the reports made so far, so the same cycle (or blocking call site) may be reported
    /// again (tests, tools).
    public static func resetReports() {
        LockOrderGraph.shared.forgetReports()
        DiagnosticsState.shared.update { $0.hangs.removeAll() }
        BlockingChecker.forgetReports()
    }

    /// What is on, what was found, and the contention counters, as lines of text.
    public static var summary: String {
        let graph = LockOrderGraph.shared.size
        let cycles = lockOrderReports.count
        let hangs = hangReports.count
        let truncated = LockOrderGraph.shared.searchCounts.truncated
        var lines = [
            "ThreadKit diagnostics: \(describe(features))",
            "  lock order: \(graph.locks) locks, \(graph.edges) orders seen, \(cycles) potential deadlock\(cycles == 1 ? "" : "s")"
                + (truncated == 0 ? "" : ", \(truncated) cycle search\(truncated == 1 ? "" : "es") truncated"),
            "  hangs: \(hangs) reported (threshold \(TKContentionCounters.format(hangThreshold)))",
            "  blocking: \(blockingReports.count) call site\(blockingReports.count == 1 ? "" : "s") reported",
        ]
        let counters = contentionCounters
        lines.append("  contention: " + (counters.isEmpty ? "nothing waited" : "\(counters.count) rows"))
        lines += counters.map { "    \($0)" }
        return lines.joined(separator: "\n")
    }

    private static func describe(_ features: TKDiagnosticsFeature) -> String {
        var names: [String] = []
        if features.contains(.lockOrder) { names.append(features.contains(.lockOrderFatal) ? "lockorder:fatal" : "lockorder") }
        if features.contains(.hangs) { names.append("hangs") }
        if features.contains(.contention) { names.append("contention") }
        if features.contains(.trace) { names.append("trace") }
        if features.contains(.blocking) { names.append(features.contains(.blockingFatal) ? "blocking:fatal" : "blocking") }
        return names.isEmpty ? "off" : names.joined(separator: ", ")
    }

    // MARK: Delivery

    /// A new lock-order cycle: stops the process in fatal mode, else prints and calls the handler.
    static func deliver(_ report: TKLockOrderReport) {
        if DiagnosticsSwitch.isOn(.lockOrderFatal) {
            misuse("\(report.description)\n(TK_DIAGNOSTICS=lockorder:fatal stops the process at the first cycle.)")
        }
        let (prints, handler) = DiagnosticsState.shared.read { ($0.prints, $0.lockOrderHandler) }
        if prints { printError(report.description) }
        handler?(report)
    }

    /// A hang found by the watchdog: printed first, then kept in `hangReports`, so that whoever
    /// sees it there knows it was printed (a program that exits once it sees the report loses
    /// nothing), then the handler.
    static func deliver(_ report: TKHangReport) {
        if DiagnosticsState.shared.read({ $0.prints }) { printError(report.description) }
        let handler = DiagnosticsState.shared.update { state -> (@Sendable (TKHangReport) -> Void)? in
            state.hangs.append(report)
            if state.hangs.count > 100 { state.hangs.removeFirst() }
            return state.hangHandler
        }
        handler?(report)
    }

    static func printError(_ text: String) { SystemCall.report(text) }
}
