// TraceCapture: one copy of the current session's rings, taken under the registry lock in one go
// (docs/DiagnosticsTrace.md §3), from which the exports and `TKTrace.threads` are built after the
// lock is released. The copy is the raw 32-byte events, so it is no bigger than the session's
// rings (which the session's total capacity bounds); the per-thread views — TKTraceEvent values,
// then a timeline row — are built for one thread at a time and dropped before the next, so an
// export's memory does not grow with the number of threads. Owned by the exporting thread.
//
// A flight-recorder dump (docs/DiagnosticsTrace.md §8) clips the copy to its window
// (`clipped(from:openUntil:)`): events older than the window go, spans open at its start are kept
// from there, and spans still open at the dump are drawn to the dump's time.
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
        /// Task jobs' enqueue → start and resume → start flows.
        var taskFlows = TraceTaskFlows()
        var eventCount = 0
    }

    private let events: [tk_trace_event]
    private let segments: [Segment]
    private let names: [String]
    /// Where spans still open at the end of a thread's events close: nil, at the thread's last
    /// event; a flight dump's time, there.
    let openUntil: UInt64?
    /// Segments grouped per kernel thread id (a ring recycled within the session by a thread whose
    /// id the kernel reused is appended to the first's events: the first ended before the second
    /// began), groups ordered by their first event.
    let threadGroups: [[Int]]

    init(events: [tk_trace_event], segments: [Segment], names: [String], openUntil: UInt64? = nil) {
        self.events = events
        self.segments = segments
        self.names = names
        self.openUntil = openUntil
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
        var taskEvents: [TraceTaskFlows.Event] = []
        for segment in segments {
            for e in events[segment.start..<segment.start + segment.count] where TraceCapture.isValid(e) {
                summary.origin = min(summary.origin, e.timestamp)
                summary.end = max(summary.end, e.timestamp)
                summary.eventCount += 1
                if e.kind == TKTraceEvent.Kind.dispatchEnqueue.rawValue && e.phase == TKTraceEvent.Phase.instant.rawValue {
                    flowStarts.append(e.object)
                } else if e.kind == TKTraceEvent.Kind.dispatchItem.rawValue && e.phase == TKTraceEvent.Phase.begin.rawValue {
                    flowEnds.append(e.object)
                } else if e.object != 0, let step = TraceTaskFlows.step(kind: e.kind, phase: e.phase) {
                    taskEvents.append(TraceTaskFlows.Event(task: e.object, time: e.timestamp, step: step))
                }
            }
        }
        if summary.origin == .max { summary.origin = 0 }
        if let openUntil { summary.end = max(summary.end, openUntil) }
        summary.end = max(summary.end, summary.origin)
        summary.completeFlows = TraceFlowSet(intersecting: flowStarts, flowEnds)
        summary.taskFlows = TraceTaskFlows(taskEvents)
        return summary
    }

    /// This capture without the events older than `cutoff` (a flight recorder's window). A span
    /// open at the cutoff (its begin older, its end not) is kept, its begin moved to the cutoff;
    /// ends and instants before it go. A ring whose oldest surviving event is older than the
    /// cutoff lost nothing of the window to wrapping: its overwritten count becomes 0. Spans still
    /// open at the end close at `openUntil` (the dump's time) rather than at the thread's last event.
    func clipped(from cutoff: UInt64, openUntil: UInt64) -> TraceCapture {
        var kept: [tk_trace_event] = []
        var clippedSegments: [Segment] = []
        for segment in segments {
            let slice = events[segment.start..<segment.start + segment.count]
            let start = kept.count
            // Begins older than the cutoff whose end is not (yet) seen, innermost last.
            var open: [tk_trace_event] = []
            var reachedWindow = false
            for e in slice where TraceCapture.isValid(e) {
                if e.timestamp >= cutoff {
                    if !reachedWindow {
                        reachedWindow = true
                        for var begin in open {
                            begin.timestamp = cutoff
                            kept.append(begin)
                        }
                    }
                    kept.append(e)
                    continue
                }
                switch e.phase {
                case TKTraceEvent.Phase.begin.rawValue:
                    open.append(e)
                case TKTraceEvent.Phase.end.rawValue:
                    if let index = open.lastIndex(where: { $0.kind == e.kind && $0.object == e.object }) {
                        open.removeSubrange(index...)
                    }
                default:
                    break
                }
            }
            if !reachedWindow {
                for var begin in open {
                    begin.timestamp = cutoff
                    kept.append(begin)
                }
            }
            let count = kept.count - start
            let oldest = slice.first(where: TraceCapture.isValid)?.timestamp ?? cutoff
            let written = oldest < cutoff ? UInt64(count) : segment.written - UInt64(segment.count) + UInt64(count)
            clippedSegments.append(
                Segment(start: start, count: count, tid: segment.tid, osName: segment.osName, written: written))
        }
        return TraceCapture(events: kept, segments: clippedSegments, names: names, openUntil: openUntil)
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

/// The flows of Swift tasks' jobs (docs/DiagnosticsTrace.md §9), found by task id: each job start
/// (`.task` begin) is joined to the task's latest enqueue before it and to its latest resume from
/// a ThreadKit continuation before it (each used once). Flow ids start at 2^32, above the
/// dispatch items' 32-bit ones. Built by the exporting thread; immutable afterwards.
struct TraceTaskFlows: Sendable {
    enum Step: UInt8, Comparable {
        case resume, enqueue, begin
        static func < (a: Step, b: Step) -> Bool { a.rawValue < b.rawValue }
    }

    struct Event {
        let task: UInt64
        let time: UInt64
        let step: Step
    }

    struct Key: Hashable {
        let task: UInt64
        let time: UInt64
        let step: UInt8
    }

    /// What flows into one job start: the enqueue's flow id and time, the resume's flow id (0: none).
    struct Into {
        var enqueue: UInt64 = 0
        var enqueuedAt: UInt64 = 0
        var resume: UInt64 = 0
    }

    /// Flow ids leaving an enqueue or a resume (keyed by task and the instant's time).
    private var out: [Key: UInt64] = [:]
    /// Flows entering a job start (keyed by task and the start's time).
    private var into: [Key: Into] = [:]

    init() {}

    static func step(kind: UInt16, phase: UInt8) -> Step? {
        switch (kind, phase) {
        case (TKTraceEvent.Kind.taskResume.rawValue, _): .resume
        case (TKTraceEvent.Kind.taskEnqueue.rawValue, _): .enqueue
        case (TKTraceEvent.Kind.task.rawValue, TKTraceEvent.Phase.begin.rawValue): .begin
        default: nil
        }
    }

    init(_ events: [Event]) {
        let ordered = events.sorted { ($0.task, $0.time, $0.step) < ($1.task, $1.time, $1.step) }
        var next: UInt64 = 1 << 32
        var pendingEnqueue: Event?
        var pendingResume: Event?
        var task: UInt64 = 0
        for e in ordered {
            if e.task != task {
                task = e.task
                pendingEnqueue = nil
                pendingResume = nil
            }
            switch e.step {
            case .resume: pendingResume = e
            case .enqueue: pendingEnqueue = e
            case .begin:
                var flows = Into()
                if let enqueue = pendingEnqueue {
                    flows.enqueue = next
                    flows.enqueuedAt = enqueue.time
                    out[Key(task: task, time: enqueue.time, step: Step.enqueue.rawValue)] = next
                    next += 1
                }
                if let resume = pendingResume {
                    flows.resume = next
                    out[Key(task: task, time: resume.time, step: Step.resume.rawValue)] = next
                    next += 1
                }
                if flows.enqueue != 0 || flows.resume != 0 { into[Key(task: task, time: e.time, step: Step.begin.rawValue)] = flows }
                pendingEnqueue = nil
                pendingResume = nil
            }
        }
    }

    /// The flow leaving the enqueue (`resume` false) or resume of `task` at `time`, if a job
    /// start takes it.
    func leaving(task: UInt64, at time: UInt64, resume: Bool) -> UInt64? {
        out[Key(task: task, time: time, step: (resume ? Step.resume : Step.enqueue).rawValue)]
    }

    /// The flows entering the job of `task` that started at `time`.
    func entering(task: UInt64, at time: UInt64) -> Into? { into[Key(task: task, time: time, step: Step.begin.rawValue)] }

    /// How many flows there are.
    var count: Int { out.count }
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
