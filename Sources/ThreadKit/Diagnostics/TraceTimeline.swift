// TraceTimeline: recorded events turned into what the exports draw (docs/DiagnosticsTrace.md §3):
// per thread, spans paired from begin/end events with their nesting depth, instants, and the
// dispatch flows from an enqueue to the item's start. Built by one thread from a snapshot;
// immutable afterwards.
//
// Pairing, per thread in recording order: a begin is pushed; an end closes the innermost open
// span of the same kind and object, closing any spans opened inside it first (at the same time);
// an end with no open span (its begin was overwritten in the ring, or recorded before the
// session) is dropped; spans still open at the end of the trace close at the thread's last event.
// Every span therefore has a begin and an end, in order, properly nested, and `sequence` numbers
// keep that order for the Chrome export where several events share a timestamp.

struct TraceTimeline {
    struct Span {
        var name: String
        var kind: TKTraceEvent.Kind
        var start: UInt64
        var end: UInt64
        var depth: Int
        var beginSequence: Int
        var endSequence: Int
        var args: [(String, String)]
        /// The event's object (a task's id for `.task`).
        var object: UInt64
        /// The dispatch flow this span ends (an item's start), if any.
        var flowIn: UInt64?
        /// Closed by the exporter, not by a recorded end.
        var closedByExport: Bool
    }

    struct Instant {
        var name: String
        var kind: TKTraceEvent.Kind
        var time: UInt64
        var sequence: Int
        var args: [(String, String)]
        /// The event's object (a task's id for `.taskEnqueue`, `.taskResume`).
        var object: UInt64
        /// The event's argument (a counter's value bits).
        var argument: UInt64
        /// The dispatch flow this instant starts (an enqueue), if any.
        var flowOut: UInt64?
    }

    struct Row {
        var threadID: UInt32
        var name: String
        var spans: [Span] = []
        var instants: [Instant] = []
        var depth = 0
        var overwritten: UInt64
    }

    var rows: [Row]
    /// The earliest event's time: the exports count microseconds from it.
    var origin: UInt64
    var end: UInt64
    /// Flow ids that have both an enqueue and a start in this trace.
    var completeFlows: TraceFlowSet
    /// Task jobs' flows.
    var taskFlows: TraceTaskFlows

    var eventCount: Int { rows.reduce(0) { $0 + 2 * $1.spans.count + $1.instants.count } }

    /// All rows at once (tests, small traces). The exports build one row at a time instead, from a
    /// TraceCapture's summary (the same origin, end and flows).
    init(_ threads: [TKTraceThread]) {
        rows = threads.map { TraceTimeline.row($0) }
        origin = threads.compactMap { $0.events.first?.timestamp }.min() ?? 0
        end = threads.compactMap { $0.events.last?.timestamp }.max() ?? origin
        completeFlows = TraceFlowSet(
            intersecting: rows.flatMap { $0.instants.compactMap(\.flowOut) },
            rows.flatMap { $0.spans.compactMap(\.flowIn) })
        var taskEvents: [TraceTaskFlows.Event] = []
        for thread in threads {
            for e in thread.events where e.object != 0 {
                if let step = TraceTaskFlows.step(kind: e.kind.rawValue, phase: e.phase.rawValue) {
                    taskEvents.append(TraceTaskFlows.Event(task: e.object, time: e.timestamp, step: step))
                }
            }
        }
        taskFlows = TraceTaskFlows(taskEvents)
    }

    /// One thread's row: its spans paired and nested, its instants. Spans still open at the end
    /// close at `openUntil` when given (a flight dump's time), else at the thread's last event.
    static func row(_ thread: TKTraceThread, openUntil: UInt64? = nil) -> Row {
        var row = Row(threadID: thread.threadID, name: thread.name, overwritten: thread.overwritten)
        var open: [(span: Span, object: UInt64)] = []
        var sequence = 0
        func close(at time: UInt64, byExport: Bool) {
            var (span, _) = open.removeLast()
            span.end = time
            span.endSequence = sequence
            span.closedByExport = byExport
            sequence += 1
            row.spans.append(span)
        }
        for event in thread.events {
            switch event.phase {
            case .begin:
                let span = Span(
                    name: spanName(event), kind: event.kind, start: event.timestamp, end: event.timestamp,
                    depth: open.count, beginSequence: sequence, endSequence: 0, args: args(event), object: event.object,
                    flowIn: event.kind == .dispatchItem ? event.object : nil, closedByExport: false)
                sequence += 1
                open.append((span, event.object))
                row.depth = max(row.depth, open.count)
            case .end:
                guard let index = open.lastIndex(where: { $0.span.kind == event.kind && $0.object == event.object }) else { continue }
                while open.count > index + 1 { close(at: event.timestamp, byExport: true) }
                close(at: event.timestamp, byExport: false)
            case .instant:
                row.instants.append(
                    Instant(
                        name: instantName(event), kind: event.kind, time: event.timestamp, sequence: sequence,
                        args: args(event), object: event.object, argument: event.argument,
                        flowOut: event.kind == .dispatchEnqueue ? event.object : nil))
                sequence += 1
            }
        }
        let last = max(thread.events.last?.timestamp ?? 0, openUntil ?? 0)
        while !open.isEmpty { close(at: last, byExport: true) }
        row.spans.sort { $0.beginSequence < $1.beginSequence }
        return row
    }

    // MARK: Names and arguments

    static func spanName(_ e: TKTraceEvent) -> String {
        let name = e.name ?? ""
        switch e.kind {
        case .thread: return name.isEmpty ? "thread" : name
        case .runLoopPass: return "pass \(name)"
        case .runLoopSleep: return "sleep"
        case .dispatchItem: return name.isEmpty ? "item" : name
        case .operation: return name.isEmpty ? "operation" : name
        case .lockWait: return "wait \(name.isEmpty ? "lock" : name)"
        case .portReceive: return "message \(e.object)"
        case .task: return e.object == 0 ? "job" : "task \(e.object)"
        default: return name.isEmpty ? e.kind.label : name
        }
    }

    static func instantName(_ e: TKTraceEvent) -> String {
        let name = e.name ?? ""
        switch e.kind {
        case .runLoopPhase: return activityName(e.detail)
        case .dispatchEnqueue: return "enqueue → \(name)"
        case .operation: return "\(operationStateName(e.detail)) \(name)"
        case .portSend: return "send \(e.object)"
        case .taskEnqueue: return "enqueue task \(e.object) → \(name)"
        case .taskResume: return "resume task \(e.object)"
        case .counter: return "\(name) = \(Double(bitPattern: e.argument))"
        default: return name.isEmpty ? e.kind.label : name
        }
    }

    /// TKRunLoopActivity's raw values (detail of a run-loop phase).
    static func activityName(_ raw: UInt8) -> String {
        switch raw {
        case 1: "entry"
        case 2: "beforeTimers"
        case 4: "beforeSources"
        case 32: "beforeWaiting"
        case 64: "afterWaiting"
        case 128: "exit"
        default: "activity \(raw)"
        }
    }

    static func operationStateName(_ raw: UInt8) -> String {
        switch raw {
        case TKTraceEvent.operationReady: "ready"
        case TKTraceEvent.operationExecuting: "executing"
        case TKTraceEvent.operationFinished: "finished"
        case TKTraceEvent.operationCancelled: "cancelled"
        default: "state \(raw)"
        }
    }

    /// TKQualityOfService levels as recorded (detail of dispatch events): 0 background … 4
    /// userInteractive, 255 unspecified.
    static func qosName(_ raw: UInt8) -> String {
        switch raw {
        case 0: "background"
        case 1: "utility"
        case 2: "default"
        case 3: "userInitiated"
        case 4: "userInteractive"
        default: "unspecified"
        }
    }

    /// A job's priority as recorded (`TaskPriority`'s raw value): its name where it has one.
    static func priorityName(_ raw: UInt8) -> String {
        switch raw {
        case 0: "unspecified"
        case 9: "background"
        case 17: "low"
        case 21: "medium"
        case 25: "high"
        case 33: "userInteractive"
        default: "\(raw)"
        }
    }

    static func args(_ e: TKTraceEvent) -> [(String, String)] {
        var args = [("kind", e.kind.label)]
        switch e.kind {
        case .dispatchEnqueue, .dispatchItem:
            args += [("queue", e.name ?? ""), ("qos", qosName(e.detail)), ("item", "\(e.object)")]
        case .operation:
            args += [("operation", e.name ?? ""), ("state", operationStateName(e.detail))]
        case .lockWait:
            args += [("lock", e.name ?? "")]
        case .portSend, .portReceive:
            args += [("msgid", "\(e.object)"), ("components", "\(e.argument)")]
        case .runLoopPass, .runLoopSleep, .runLoopPhase:
            args += [("mode", e.name ?? "")]
        case .task, .taskEnqueue:
            args += [("task", "\(e.object)"), ("priority", priorityName(e.detail)), ("executor", e.name ?? "")]
        case .taskResume:
            args += [("task", "\(e.object)")]
        case .counter:
            args += [("counter", e.name ?? ""), ("value", "\(Double(bitPattern: e.argument))")]
        case .thread, .mark, .interval:
            break
        }
        return args
    }
}
