// TraceCapture: one copy of the current session's rings, taken under the registry lock in one go
// (docs/DiagnosticsTrace.md §3), from which the exports and `TKTrace.threads` are built after the
// lock is released. The copy is the raw 32-byte events, so it is no bigger than the session's
// rings (which the session's total capacity bounds); the per-thread views — TKTraceEvent values,
// then a timeline row — are built for one thread at a time and dropped before the next, so an
// export's memory does not grow with the number of threads. Owned by the exporting thread.
import CThreadKit

struct TraceCapture {
    /// One ring's surviving events, `events[start ..< start + count]`.
    struct Segment {
        let start: Int
        let count: Int
        let tid: UInt32
        let osName: String
        /// Events the ring was given since its reset (the rest of `count` were overwritten).
        let written: UInt64
    }

    /// What an export must know of the whole session before its first row.
    struct Summary {
        /// The earliest event's time: the exports count microseconds from it.
        var origin: UInt64 = .max
        var end: UInt64 = 0
        /// Flow ids that have both an enqueue and an item start in the capture.
        var completeFlows = TraceFlowSet()
        var eventCount = 0
    }

    private let events: [tk_trace_event]
    private let segments: [Segment]
    private let names: [String]
    /// Segments grouped per kernel thread id (a ring recycled within the session by a thread whose
    /// id the kernel reused is appended to the first's events: the first ended before the second
    /// began), groups ordered by their first event.
    let threadGroups: [[Int]]

    init(events: [tk_trace_event], segments: [Segment], names: [String]) {
        self.events = events
        self.segments = segments
        self.names = names
        let firsts = segments.map { s in
            events[s.start..<s.start + s.count].first(where: TraceCapture.isValid)?.timestamp
        }
        let ordered = segments.indices.filter { firsts[$0] != nil }.sorted { firsts[$0]! < firsts[$1]! }
        var groups: [[Int]] = []
        var position: [UInt32: Int] = [:]
        for index in ordered {
            let tid = segments[index].tid
            if let at = position[tid] {
                groups[at].append(index)
            } else {
                position[tid] = groups.count
                groups.append([index])
            }
        }
        threadGroups = groups
    }

    /// Whether a copied event has a kind and phase this build knows.
    static func isValid(_ e: tk_trace_event) -> Bool {
        TKTraceEvent.Kind(rawValue: e.kind) != nil && TKTraceEvent.Phase(rawValue: e.phase) != nil
    }

    /// Origin, end, complete flows and event count, in one pass over the raw events.
    func summary() -> Summary {
        var summary = Summary()
        var flowStarts: [UInt64] = []
        var flowEnds: [UInt64] = []
        for segment in segments {
            for e in events[segment.start..<segment.start + segment.count] where TraceCapture.isValid(e) {
                summary.origin = min(summary.origin, e.timestamp)
                summary.end = max(summary.end, e.timestamp)
                summary.eventCount += 1
                if e.kind == TKTraceEvent.Kind.dispatchEnqueue.rawValue && e.phase == TKTraceEvent.Phase.instant.rawValue {
                    flowStarts.append(e.object)
                } else if e.kind == TKTraceEvent.Kind.dispatchItem.rawValue && e.phase == TKTraceEvent.Phase.begin.rawValue {
                    flowEnds.append(e.object)
                }
            }
        }
        if summary.origin == .max { summary.origin = 0 }
        summary.end = max(summary.end, summary.origin)
        summary.completeFlows = TraceFlowSet(intersecting: flowStarts, flowEnds)
        return summary
    }

    /// The events of thread group `group` (an index into `threadGroups`), oldest first.
    func thread(_ group: Int) -> TKTraceThread {
        var converted: [TKTraceEvent] = []
        var name = ""
        var overwritten: UInt64 = 0
        let indexes = threadGroups[group]
        converted.reserveCapacity(indexes.reduce(0) { $0 + segments[$1].count })
        let tid = segments[indexes[0]].tid
        for index in indexes {
            let segment = segments[index]
            let first = converted.count
            for e in events[segment.start..<segment.start + segment.count] {
                guard let kind = TKTraceEvent.Kind(rawValue: e.kind), let phase = TKTraceEvent.Phase(rawValue: e.phase) else { continue }
                let eventName = e.name != 0 && Int(e.name) < names.count ? names[Int(e.name)] : nil
                converted.append(
                    TKTraceEvent(
                        timestamp: e.timestamp, threadID: tid, kind: kind, phase: phase, name: eventName,
                        object: e.object, argument: e.argument, detail: e.detail))
            }
            // The latest name the thread announced (a TKThread's start) wins over its OS name; a
            // later ring of the same id names the row.
            let announced = converted[first...].last { $0.kind == .thread && $0.phase == .begin && $0.name != nil }?.name
            name = announced ?? (segment.osName.isEmpty ? "thread \(tid)" : segment.osName)
            overwritten += segment.written > UInt64(segment.count) ? segment.written - UInt64(segment.count) : 0
        }
        return TKTraceThread(threadID: tid, name: name, events: converted, overwritten: overwritten)
    }

    /// Every thread, in order of first event.
    func allThreads() -> [TKTraceThread] { threadGroups.indices.map(thread) }
}

/// A set of flow ids as a sorted array: 8 bytes an id, looked up by binary search.
struct TraceFlowSet: Sendable {
    private var ids: [UInt64] = []

    init() {}

    /// The ids in both `a` and `b`.
    init(intersecting a: [UInt64], _ b: [UInt64]) {
        let a = a.sorted()
        let b = b.sorted()
        var i = 0
        var j = 0
        while i < a.count && j < b.count {
            if a[i] < b[j] {
                i += 1
            } else if a[i] > b[j] {
                j += 1
            } else {
                if ids.last != a[i] { ids.append(a[i]) }
                i += 1
                j += 1
            }
        }
    }

    func contains(_ id: UInt64) -> Bool {
        var low = 0
        var high = ids.count
        while low < high {
            let mid = (low + high) / 2
            if ids[mid] < id { low = mid + 1 } else { high = mid }
        }
        return low < ids.count && ids[low] == id
    }

    var count: Int { ids.count }
}
