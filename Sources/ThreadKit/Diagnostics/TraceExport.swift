// TraceExport: what the exports write from and to (docs/DiagnosticsTrace.md §3). `TraceRows`
// hands out timeline rows one at a time — built from a TraceCapture for the real exports (one
// thread's row lives only while it is written), or taken from a whole TraceTimeline for tests —
// with what must be known before the first row (origin, end, complete flows). `TraceSink` is where
// the text goes: a file, through a 64 KiB buffer, or a String for `chromeJSON()`/`html()`. So an
// export to a file holds the capture (no bigger than the session's rings), one row and the
// buffer, whatever the number of threads. Both belong to the exporting thread only.
import Glibc

/// The rows of an export, one at a time, and what the export needs before the first.
struct TraceRows {
    let origin: UInt64
    let end: UInt64
    let completeFlows: TraceFlowSet
    /// Task jobs' flows (enqueue → start, resume → start).
    let taskFlows: TraceTaskFlows
    /// How many rows there are.
    let count: Int
    private let make: (Int) -> TraceTimeline.Row

    /// The rows of a capture, each built when asked for.
    init(_ capture: TraceCapture) {
        let summary = capture.summary()
        origin = summary.origin
        end = summary.end
        completeFlows = summary.completeFlows
        taskFlows = summary.taskFlows
        count = capture.threadGroups.count
        make = { TraceTimeline.row(capture.thread($0), openUntil: capture.openUntil) }
    }

    /// The rows of a timeline already built.
    init(_ timeline: TraceTimeline) {
        origin = timeline.origin
        end = timeline.end
        completeFlows = timeline.completeFlows
        taskFlows = timeline.taskFlows
        count = timeline.rows.count
        make = { timeline.rows[$0] }
    }

    /// Row `index` (built anew on each call for a capture: ask once).
    func row(_ index: Int) -> TraceTimeline.Row { make(index) }
}

/// Where an export's text goes: a file descriptor through a buffer, or a String in memory. A
/// write error is kept (the first errno) and later writes are dropped; the caller reads `error`.
final class TraceSink {
    private static let flushSize = 1 << 16
    private let fd: Int32 // -1: in memory
    private var buffer: [UInt8] = []
    private var memory = ""
    /// The first errno a write or the final flush met; 0 when none.
    private(set) var error: Int32 = 0

    /// Text kept in memory (`text`).
    init() { fd = -1 }

    /// Text written to `fd` (the caller opens and closes it; call `flush()` at the end).
    init(fileDescriptor: Int32) {
        fd = fileDescriptor
        buffer.reserveCapacity(TraceSink.flushSize * 2)
    }

    /// Streams `body` into a new file at `path` (PrivateDirectory.replace: written under a
    /// private temporary name, mode 0600, then renamed over `path`, so nothing planted at `path`
    /// is followed or written through), flushes and closes it; nil, or why it could not. The
    /// callers (TKTrace's exports) name the failure in their own terms.
    static func writeFile(_ path: String, _ body: (TraceSink) -> Void) -> PrivateDirectory.Refusal? {
        PrivateDirectory.replace(path) { fd in write(to: fd, body) }
    }

    /// Streams `body` into the open file `fd` and flushes; the first errno met, 0 when none. The
    /// caller closes `fd`.
    static func write(to fd: Int32, _ body: (TraceSink) -> Void) -> Int32 {
        let sink = TraceSink(fileDescriptor: fd)
        body(sink)
        sink.flush()
        return sink.error
    }

    func write(_ text: String) {
        if fd < 0 {
            memory += text
            return
        }
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= TraceSink.flushSize { flush() }
    }

    /// Writes out what is buffered (file sinks).
    func flush() {
        defer { buffer.removeAll(keepingCapacity: true) }
        guard fd >= 0, error == 0, !buffer.isEmpty else { return }
        buffer.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    error = errno
                    return
                }
                offset += n
            }
        }
    }

    /// What was written (memory sinks).
    var text: String { memory }
}
