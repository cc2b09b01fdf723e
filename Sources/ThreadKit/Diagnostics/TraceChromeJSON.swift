// TraceChromeJSON: a trace as Chrome trace-event JSON (docs/DiagnosticsTrace.md §3), the format
// chrome://tracing and Perfetto open: {"traceEvents": [...], "displayTimeUnit": "ms"}.
// Per thread: "M" metadata (thread_name, thread_sort_index), "B"/"E" pairs for spans, "i" instants
// (thread scope), and for dispatch items a flow: "s" at the enqueue, "f" (binding to the enclosing
// slice) at the item's start; Swift tasks' jobs get the same from their enqueue and from the
// resume of their continuation (TraceTaskFlows), and counters are "C" events (process-scoped, as
// Chrome draws them). Timestamps are microseconds from the first event, three decimals.
// Written row by row into a TraceSink (a file or a String); by the exporting thread only.
import Glibc

enum TraceChromeJSON {
    /// The whole document as a String (tests, small traces).
    static func render(_ timeline: TraceTimeline, processName: String = "ThreadKit") -> String {
        let sink = TraceSink()
        write(TraceRows(timeline), to: sink, processName: processName)
        return sink.text
    }

    /// Writes the whole document, one row at a time.
    /// `otherData` adds string fields to the document's `otherData` (a flight dump's reason, window
    /// and thread dump).
    static func write(_ rows: TraceRows, to sink: TraceSink, processName: String = "ThreadKit", otherData: [(String, String)] = []) {
        let pid = Int(getpid())
        let other = otherData.map { ",\(quote($0.0)):\(quote($0.1))" }.joined()
        sink.write("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"recorder\":\"ThreadKit TKTrace\"\(other)},\"traceEvents\":[\n")
        sink.write("{\"ph\":\"M\",\"pid\":\(pid),\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\(quote(processName))}}")
        for index in 0..<rows.count {
            write(rows.row(index), index: index, pid: pid, origin: rows.origin, flows: rows.completeFlows, tasks: rows.taskFlows, to: sink)
        }
        sink.write("\n]}\n")
    }

    /// One row's events, each preceded by ",\n" (the process metadata always comes first).
    private static func write(
        _ row: TraceTimeline.Row, index: Int, pid: Int, origin: UInt64, flows: TraceFlowSet, tasks: TraceTaskFlows, to sink: TraceSink
    ) {
        let tid = Int(row.threadID)
        func emit(_ object: String) {
            sink.write(",\n")
            sink.write(object)
        }
        emit("{\"ph\":\"M\",\"pid\":\(pid),\"tid\":\(tid),\"name\":\"thread_name\",\"args\":{\"name\":\(quote(row.name))}}")
        emit("{\"ph\":\"M\",\"pid\":\(pid),\"tid\":\(tid),\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":\(index)}}")
        // Begins, ends and instants in recording order (their sequence numbers).
        enum Item { case begin(Int), end(Int), instant(Int) }
        var items: [(Int, Item)] = []
        items.reserveCapacity(row.spans.count * 2 + row.instants.count)
        for (i, span) in row.spans.enumerated() {
            items.append((span.beginSequence, .begin(i)))
            items.append((span.endSequence, .end(i)))
        }
        for (i, instant) in row.instants.enumerated() { items.append((instant.sequence, .instant(i))) }
        items.sort { $0.0 < $1.0 }
        let head = "\"pid\":\(pid),\"tid\":\(tid)"
        /// One event; `rest` holds its name, category and arguments, or a flow's id and binding.
        func event(_ ph: String, _ time: UInt64, _ rest: String) {
            emit("{\"ph\":\"\(ph)\",\(head),\"ts\":\(micros(time, origin)),\(rest)}")
        }
        func flow(_ ph: String, _ id: UInt64?, _ time: UInt64) {
            guard let id, flows.contains(id) else { return }
            event(ph, time, "\"id\":\(id),\"name\":\"dispatch\",\"cat\":\"flow\"" + (ph == "f" ? ",\"bp\":\"e\"" : ""))
        }
        func taskFlow(_ ph: String, _ id: UInt64, _ time: UInt64) {
            guard id != 0 else { return }
            event(ph, time, "\"id\":\(id),\"name\":\"task\",\"cat\":\"task flow\"" + (ph == "f" ? ",\"bp\":\"e\"" : ""))
        }
        for (_, item) in items {
            switch item {
            case .begin(let i):
                let span = row.spans[i]
                event("B", span.start, "\"name\":\(quote(span.name)),\"cat\":\(quote(span.kind.label)),\"args\":\(arguments(span.args))")
                flow("f", span.flowIn, span.start)
                if span.kind == .task, let into = tasks.entering(task: span.object, at: span.start) {
                    taskFlow("f", into.enqueue, span.start)
                    taskFlow("f", into.resume, span.start)
                }
            case .end(let i):
                let span = row.spans[i]
                event("E", span.end, "\"name\":\(quote(span.name)),\"cat\":\(quote(span.kind.label))")
            case .instant(let i):
                let instant = row.instants[i]
                if instant.kind == .counter {
                    // Non-finite values have no JSON number: left out.
                    let value = Double(bitPattern: instant.argument)
                    if value.isFinite {
                        let name = row.instants[i].args.first { $0.0 == "counter" }?.1 ?? "counter"
                        event("C", instant.time, "\"name\":\(quote(name)),\"cat\":\"counter\",\"args\":{\"value\":\(value)}")
                    }
                    continue
                }
                event(
                    "i", instant.time,
                    "\"s\":\"t\",\"name\":\(quote(instant.name)),\"cat\":\(quote(instant.kind.label)),\"args\":\(arguments(instant.args))")
                flow("s", instant.flowOut, instant.time)
                if instant.kind == .taskEnqueue || instant.kind == .taskResume,
                    let id = tasks.leaving(task: instant.object, at: instant.time, resume: instant.kind == .taskResume)
                {
                    taskFlow("s", id, instant.time)
                }
            }
        }
    }

    /// Microseconds from `origin`, with three decimals (nanosecond resolution).
    static func micros(_ time: UInt64, _ origin: UInt64) -> String {
        let ns = time >= origin ? time - origin : 0
        let fraction = ns % 1000
        let padded = fraction < 10 ? "00\(fraction)" : fraction < 100 ? "0\(fraction)" : "\(fraction)"
        return "\(ns / 1000).\(padded)"
    }

    static func arguments(_ args: [(String, String)]) -> String {
        "{" + args.map { "\(quote($0.0)):\(quote($0.1))" }.joined(separator: ",") + "}"
    }

    /// A JSON string literal. `<` is escaped too, so the text can sit inside an HTML <script>.
    static func quote(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "<": out += "\\u003c"
            default:
                if scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
