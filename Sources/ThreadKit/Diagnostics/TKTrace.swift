// TKTrace: the public face of the trace recorder (docs/DiagnosticsTrace.md §5). Start a session,
// stop it, take its events, export them as Chrome trace-event JSON or a self-contained HTML
// timeline. Any thread may call any member; sessions are serialised by `control`.
//
// TK_DIAGNOSTICS=trace (or `all`) turns recording on before main, in session 1 with the default
// capacity; `start` begins a fresh session either way.
import Glibc

public enum TKTrace {
    /// Serialises start/stop (a session's rings are set up before the switch turns on).
    private static let control = Protected(())

    /// Starts recording, in a new session (events of earlier sessions are no longer exported).
    /// `capacity`: slots per thread, rounded up to a power of two (32 bytes each); a thread's
    /// ring keeps its latest `capacity - 1` events (the slot it fills next is never exported).
    public static func start(capacity: Int = 16_384) {
        control.withLock { _ in
            TraceRecorder.beginSession(capacity: capacity)
            _ = DiagnosticsSwitch.update { $0.union(.trace) }
        }
    }

    /// Stops recording. The session's events stay available to `threads` and the exports until
    /// the next `start`.
    public static func stop() {
        control.withLock { _ in
            _ = DiagnosticsSwitch.update { $0.subtracting(.trace) }
        }
    }

    /// Whether hooks record now.
    public static var isRecording: Bool { DiagnosticsSwitch.isOn(.trace) }

    /// Places a named instant on the calling thread's row (when recording).
    public static func mark(_ name: String) {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.record(.mark, .instant, named: name) }
    }

    /// The current session's events, per thread (threads in order of their first event).
    /// May be called while recording: events recorded meanwhile may or may not be included.
    public static var threads: [TKTraceThread] { TraceRecorder.snapshot() }

    /// All events of the current session, every thread's in recording order.
    public static var events: [TKTraceEvent] { threads.flatMap(\.events) }

    /// The current session as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev).
    public static func chromeJSON() -> String {
        TraceChromeJSON.render(TraceTimeline(threads))
    }

    /// The current session as one self-contained HTML page: a timeline, one row per thread.
    public static func html(title: String = "ThreadKit trace") -> String {
        TraceHTML.render(TraceTimeline(threads), title: title)
    }

    /// Writes `chromeJSON()` to `path`. Throws `TKError(.systemCall)` naming the path and errno.
    public static func writeChromeJSON(to path: String) throws {
        try write(chromeJSON(), to: path, call: "writeChromeJSON")
    }

    /// Writes `html(title:)` to `path`. Throws `TKError(.systemCall)` naming the path and errno.
    public static func writeHTML(to path: String, title: String = "ThreadKit trace") throws {
        try write(html(title: title), to: path, call: "writeHTML")
    }

    private static func write(_ text: String, to path: String, call: String) throws {
        let error = SystemCall.writeFile(path, contents: text)
        if error != 0 {
            throw TKError(.systemCall, "TKTrace.\(call)(to: \"\(path)\"): cannot write the file: \(SystemCall.errnoName(error)). "
                          + "Fix: pass a path in an existing, writable directory.", errno: error)
        }
    }
}
