// TKTrace+Signposts: named intervals and counters from user code (docs/DiagnosticsTrace.md §10),
// drawn on the calling thread's row (intervals) and on counter tracks (Chrome "C" events; rows of
// their own in the HTML). Any thread; each call records only while the recorder is on (one
// relaxed load and a branch otherwise).

/// A named interval begun by `TKTrace.beginInterval(_:)`; `end()` closes it. Intervals begun this
/// way need not nest: each has an id of its own.
public struct TKTraceInterval: Sendable {
    /// The interval's id (0 when the recorder was off at its beginning: `end()` then records nothing).
    public let id: UInt64

    /// Ends the interval, on the thread that began it (an end recorded on another thread closes
    /// nothing there, and the interval is drawn to its thread's last event).
    public func end() {
        if id != 0 && DiagnosticsSwitch.isOn(.trace) { TraceRecorder.intervalEnds(id: id) }
    }
}

extension TKTrace {
    /// Runs `body` inside a named interval on the calling thread's row (a span of kind
    /// `.interval`), and returns what it returns; a thrown error ends the interval too. Intervals
    /// of this form nest. `body` runs the same whether or not the recorder is on.
    public static func interval<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
        guard DiagnosticsSwitch.isOn(.trace) else { return try body() }
        TraceRecorder.intervalBegins(name, id: 0)
        defer { TraceRecorder.intervalEnds(id: 0) }
        return try body()
    }

    /// Begins a named interval on the calling thread's row; call `end()` on the result, on the
    /// same thread. For spans that do not nest with others (begun in one callback, ended in
    /// another); `interval(_:_:)` is simpler where a closure fits.
    public static func beginInterval(_ name: String) -> TKTraceInterval {
        guard DiagnosticsSwitch.isOn(.trace) else { return TKTraceInterval(id: 0) }
        let id = TraceRecorder.newIntervalID()
        TraceRecorder.intervalBegins(name, id: id)
        return TKTraceInterval(id: id)
    }

    /// Records `value` on the counter track `name` (a queue depth, bytes in flight): a Chrome
    /// counter event ("C"), a step line in the HTML timeline. Non-finite values are recorded but
    /// left out of the exports (JSON has no number for them).
    public static func counter(_ name: String, _ value: Double) {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.counter(name, value) }
    }
}
