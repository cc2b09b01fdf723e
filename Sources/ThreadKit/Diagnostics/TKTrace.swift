// TKTrace: the public face of the trace recorder (docs/DiagnosticsTrace.md §5). Start a session,
// stop it, take its events, export them as Chrome trace-event JSON or a self-contained HTML
// timeline. Any thread may call any member; sessions are serialised by `control`.
//
// TK_DIAGNOSTICS=trace (or `all`) turns recording on before main, in session 1 with the default
// capacity; `start` begins a fresh session either way.
import Glibc

/// The trace recorder (`TK_DIAGNOSTICS=trace`): records what threads, run loops, queues,
/// operations, locks and ports do into per-thread rings, and exports it as Chrome trace-event
/// JSON or a self-contained HTML timeline (what `threadkit trace` shows). Not an Apple API;
/// Instruments' System Trace is the nearest counterpart. Every member may be called from any thread.
public enum TKTrace {
    /// Serialises start/stop (a session's rings are set up before the switch turns on).
    private static let control = Protected(())

    /// Starts recording, in a new session (events of earlier sessions are no longer exported).
    /// `capacity`: slots per thread, rounded up to a power of two (32 bytes each); a thread's
    /// ring keeps its latest `capacity - 1` events (the slot it fills next is never exported).
    /// `totalCapacity`: slots all threads' rings share (at least `capacity`; 2^20, 32 MiB, by
    /// default). Threads get `capacity` while it lasts, then what is left, never under 64; once
    /// it is spent a new thread takes over the ring of a thread that exited. It bounds the
    /// recorder's memory and the size of an export, however many threads record. A flight
    /// recorder running is turned into a plain session (`startFlightRecorder(window:)` starts one).
    public static func start(capacity: Int = 16_384, totalCapacity: Int = 1 << 20) {
        control.withLock { _ in
            TraceRecorder.beginSession(capacity: capacity, totalCapacity: totalCapacity)
            _ = DiagnosticsSwitch.update { $0.union(.trace).subtracting(.flightRecorder) }
        }
    }

    /// Stops recording (the flight recorder too). The session's events stay available to
    /// `threads`, the exports and `dumpFlight(to:)` (then the whole session) until the next `start`.
    /// Hooks are not waited for: a thread that was recording an event as `stop()` was called
    /// (checked the switch just before) may still add that one event, and for a thread new to the
    /// session its row, just after this returns. Two reads of the session can then differ by it;
    /// an export is one consistent snapshot.
    public static func stop() {
        control.withLock { _ in
            _ = DiagnosticsSwitch.update { $0.subtracting([.trace, .flightRecorder]) }
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

    /// The current session as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev). The
    /// whole text is in memory: for a large trace, `writeChromeJSON(to:)` streams it to a file.
    public static func chromeJSON() -> String {
        let sink = TraceSink()
        TraceChromeJSON.write(TraceRows(TraceRecorder.capture()), to: sink)
        return sink.text
    }

    /// The current session as one self-contained HTML page: a timeline, one row per thread.
    public static func html(title: String = "ThreadKit trace") -> String {
        let sink = TraceSink()
        TraceHTML.write(TraceRows(TraceRecorder.capture()), title: title, to: sink)
        return sink.text
    }

    /// Writes `chromeJSON()` to `path`, streaming: memory stays bounded by the session's rings
    /// plus one thread's row, whatever the file's size. The file is new, mode 0600: it is written
    /// under a private temporary name beside `path` and renamed over `path`, so a symbolic link,
    /// a FIFO or a file already at `path` is replaced, never followed or written through. Throws
    /// `TKError(.systemCall)` naming the path and errno when the file cannot be created or written
    /// (nothing is left behind then), or when the directory is not this user's own and others may
    /// replace files in it (a directory not owned by this user or root, or one others may write to
    /// that is not sticky as /tmp is).
    public static func writeChromeJSON(to path: String) throws {
        try export(to: path, call: "writeChromeJSON") { TraceChromeJSON.write(TraceRows(TraceRecorder.capture()), to: $0) }
    }

    /// Writes `html(title:)` to `path`, streaming as `writeChromeJSON(to:)` does. Throws
    /// `TKError(.systemCall)` naming the path and errno.
    public static func writeHTML(to path: String, title: String = "ThreadKit trace") throws {
        try export(to: path, call: "writeHTML") { TraceHTML.write(TraceRows(TraceRecorder.capture()), title: title, to: $0) }
    }

    private static func export(to path: String, call: String, _ body: (TraceSink) -> Void) throws {
        if let refusal = TraceSink.writeFile(path, body) {
            throw TKError(
                .systemCall,
                "TKTrace.\(call)(to: \"\(path)\"): cannot write the file: \(refusal.reason). Fix: pass a path in an existing "
                    + "directory of this user's (or a sticky one such as /tmp) that it may write to, on a file system with room "
                    + "for the trace.", errno: refusal.errno)
        }
    }
}
