// TKTrace+Flight: the flight recorder's public face (docs/DiagnosticsTrace.md §8): start it with a
// window, dump the last seconds. The work is FlightRecorder's. Any thread; a start is serialised
// with TKTrace.start/stop through the switch word's compare-and-swap and the registry lock.

extension TKTrace {
    /// Starts the trace recorder as a flight recorder, in a new session (what
    /// `TK_DIAGNOSTICS=flight:30s` does before `main`): every thread records as with `start`, into
    /// rings whose memory is fixed by `totalCapacity` — at most `totalCapacity` × 32 bytes of
    /// events (16 MiB by default), plus about 4.5 KiB per live thread (its ring's header, name
    /// cache and, once the budget is spent, a 64-slot minimum ring) — however long the process
    /// runs. A dump (`dumpFlight(to:)`, a hang report, a misuse stop, the dump signal) writes the
    /// last `window` of it. A busy thread's ring may hold less than the window: its oldest events
    /// go first (the HTML row says how many were dropped). Dispatch items are sampled, so that
    /// the recorder costs next to nothing on a pool running millions of items: a thread that
    /// submits items sparsely has every one traced, and one that floods the pool about one item
    /// per 16 µs (each traced item complete: its enqueue, start and end). `window` must be
    /// positive.
    public static func startFlightRecorder(
        window: Duration, capacity: Int = 16_384, totalCapacity: Int = 1 << 19
    ) {
        if window <= .zero {
            misuse(
                "TKTrace.startFlightRecorder(window: \(window)): the window must be positive. Fix: pass the span of "
                    + "time a dump should keep, such as .seconds(30).")
        }
        FlightRecorder.setWindow(window)
        start(capacity: capacity, totalCapacity: totalCapacity)
        _ = DiagnosticsSwitch.update { $0.union(.flightRecorder) }
    }

    /// Whether the flight recorder is on (`TK_DIAGNOSTICS=flight`, `startFlightRecorder`) and
    /// recording; `stop()` turns it off.
    public static var isFlightRecording: Bool { FlightRecorder.isOn }

    /// Bytes the recorder's rings hold now: every ring made so far (rings are reused, never
    /// freed), its slots, header and name cache. What `startFlightRecorder`'s bound is about.
    public static var recorderMemory: Int { TraceRecorder.ringMemory }

    /// The span of time a flight dump keeps (`flight:DURATION`, 30 s when not given, or the last
    /// `startFlightRecorder(window:)`).
    public static var flightWindow: Duration { FlightRecorder.window }

    /// Writes the flight recorder's last `flightWindow` (the whole session when the recorder was
    /// started with `start` instead) as two new files in `directory`:
    /// `threadkit-flight-<pid>-<yyyymmdd-hhmmss>-<random>.json` (Chrome trace-event JSON, the
    /// thread dump in `otherData.threadDump`) and `.html` (the timeline, the thread dump under its
    /// header). Both are created new, mode 0600, under a name with twelve random characters:
    /// nothing already in the directory (a file, a symbolic link, a FIFO) is replaced, followed
    /// or opened. The directory must be this user's own or root's, and sticky (as /tmp is) when
    /// others may write to it; another is refused with a thrown error. Returns their paths.
    /// Events older than the window are left out; spans open at its start are drawn from there,
    /// and spans still open now (a hung item) to now. Recording goes on meanwhile; a dump being
    /// written by another trigger is waited for. Throws `TKError(.systemCall)` naming the file and
    /// errno when it cannot be written.
    @discardableResult
    public static func dumpFlight(to directory: String) throws -> (json: String, html: String) {
        while true {
            if let written = try FlightRecorder.write(to: directory, reason: "TKTrace.dumpFlight(to:)") {
                return (written.json, written.html)
            }
            TKThread.sleep(for: .milliseconds(1)) // another dump is being written: wait for its end
        }
    }
}
