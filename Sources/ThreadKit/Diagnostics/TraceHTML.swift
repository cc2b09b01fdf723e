// TraceHTML: a TraceTimeline as one self-contained HTML page (docs/DiagnosticsTrace.md §4): the
// rows embedded as JSON, drawn by inline JavaScript into inline SVG; no network, no other file.
// One row per thread, its spans stacked by nesting depth inside the row, instants as ticks,
// dispatch flows as curves from the enqueue to the item's start. Wheel zooms around the pointer,
// dragging pans, hovering shows a tooltip; "Reset" fits the whole trace. Once drawn, the page
// writes the number of rows into its title and <body data-rows>, and where each row's band was
// laid out into <body data-row-tops>, which the tests read back from headless Chromium. Spans
// the exporter closed (no end recorded) are drawn dashed. Written row by row into a TraceSink (a
// file or a String); by the exporting thread only.
//
// Below the thread rows (docs/DiagnosticsTrace.md §9): one row per Swift task (its jobs on
// whichever threads ran them, the wait from each enqueue to the job's start as a thin line;
// the latest `maximumTaskRows` tasks), then one row per counter (a step line). Their data is
// gathered while the thread rows are written and written after them; the page counts them into
// <body data-task-rows> and <body data-counter-rows>. A flight dump adds a note and the thread
// dump, shown under the header.

enum TraceHTML {
    /// The whole page as a String (tests, small traces).
    static func render(_ timeline: TraceTimeline, title: String) -> String {
        let sink = TraceSink()
        write(TraceRows(timeline), title: title, to: sink)
        return sink.text
    }

    /// Task rows drawn at most (the tasks with the latest jobs).
    static let maximumTaskRows = 256

    /// One job of a task, for its task row.
    private struct TaskJob {
        var start: UInt64
        var end: UInt64
        var tid: UInt32
        var executor: String
        var enqueuedAt: UInt64
    }

    /// A task's row: its priority (of its latest job) and jobs.
    private struct TaskRow {
        var priority: String
        var jobs: [TaskJob] = []
    }

    /// Writes the page: the part of the template before the data, the data one row at a time,
    /// the task and counter rows gathered meanwhile, the rest of the template. `note` and `dump`
    /// (a flight dump's) are shown under the header.
    static func write(_ rows: TraceRows, title: String, to sink: TraceSink, note: String? = nil, dump: String? = nil) {
        let (before, after) = template
        // The title goes into the template only, never into the data (which may contain any text).
        sink.write(before.replacing("TRACE_TITLE", with: escapeHTML(title)))
        let duration = TraceChromeJSON.micros(rows.end, rows.origin)
        sink.write("{\"title\":\(TraceChromeJSON.quote(title)),\"duration\":\(duration),")
        if let note { sink.write("\"note\":\(TraceChromeJSON.quote(note)),") }
        if let dump { sink.write("\"dump\":\(TraceChromeJSON.quote(dump)),") }
        sink.write("\"rows\":[\n")
        var tasks: [UInt64: TaskRow] = [:]
        var counters: [String: [(UInt64, Double)]] = [:]
        for index in 0..<rows.count {
            if index > 0 { sink.write(",\n") }
            let row = rows.row(index)
            write(row, origin: rows.origin, flows: rows.completeFlows, tasks: rows.taskFlows, to: sink)
            for span in row.spans where span.kind == .task && span.object != 0 {
                let args = Dictionary(span.args, uniquingKeysWith: { a, _ in a })
                let enqueued = rows.taskFlows.entering(task: span.object, at: span.start)?.enqueuedAt ?? 0
                tasks[span.object, default: TaskRow(priority: args["priority"] ?? "")].jobs.append(
                    TaskJob(start: span.start, end: span.end, tid: row.threadID, executor: args["executor"] ?? "", enqueuedAt: enqueued))
            }
            for instant in row.instants where instant.kind == .counter {
                let value = Double(bitPattern: instant.argument)
                guard value.isFinite else { continue }
                let name = instant.args.first { $0.0 == "counter" }?.1 ?? "counter"
                counters[name, default: []].append((instant.time, value))
            }
        }
        sink.write("\n],\"tasks\":[")
        writeTasks(tasks, origin: rows.origin, to: sink)
        sink.write("],\"counters\":[")
        for (index, name) in counters.keys.sorted().enumerated() {
            let points = counters[name]!.sorted { $0.0 < $1.0 }
            sink.write((index > 0 ? ",\n" : "\n") + "{\"name\":\(TraceChromeJSON.quote(name)),\"points\":[")
            for (i, (time, value)) in points.enumerated() {
                sink.write((i > 0 ? "," : "") + "[\(TraceChromeJSON.micros(time, rows.origin)),\(value)]")
            }
            sink.write("]}")
        }
        sink.write("]}")
        sink.write(after.replacing("TRACE_TITLE", with: escapeHTML(title)))
    }

    /// The task rows: the `maximumTaskRows` tasks whose last job ended latest, ordered by their
    /// first job's start.
    private static func writeTasks(_ tasks: [UInt64: TaskRow], origin: UInt64, to sink: TraceSink) {
        let latest = tasks.sorted { ($0.value.jobs.map(\.end).max() ?? 0) > ($1.value.jobs.map(\.end).max() ?? 0) }
            .prefix(maximumTaskRows)
            .sorted { ($0.value.jobs.first?.start ?? 0, $0.key) < ($1.value.jobs.first?.start ?? 0, $1.key) }
        for (index, (id, row)) in latest.enumerated() {
            sink.write(
                (index > 0 ? ",\n" : "\n") + "{\"id\":\(id),\"priority\":\(TraceChromeJSON.quote(row.priority)),\"jobs\":[")
            for (i, job) in row.jobs.sorted(by: { $0.start < $1.start }).enumerated() {
                let enqueued = job.enqueuedAt == 0 ? "-1" : TraceChromeJSON.micros(job.enqueuedAt, origin)
                sink.write(
                    (i > 0 ? "," : "") + "[\(TraceChromeJSON.micros(job.start, origin)),\(TraceChromeJSON.micros(job.end, origin)),"
                        + "\(job.tid),\(TraceChromeJSON.quote(job.executor)),\(enqueued)]")
            }
            sink.write("]}")
        }
        if tasks.count > latest.count {
            sink.write(",\n{\"id\":0,\"more\":\(tasks.count - latest.count),\"priority\":\"\",\"jobs\":[]}")
        }
    }

    /// One row as the page's script reads it.
    private static func write(_ row: TraceTimeline.Row, origin: UInt64, flows: TraceFlowSet, tasks: TraceTaskFlows, to sink: TraceSink) {
        func flow(_ id: UInt64?) -> String { id.map { flows.contains($0) ? "\($0)" : "0" } ?? "0" }
        /// A task job's incoming flows, as an array; else the dispatch flow.
        func flowIn(_ s: TraceTimeline.Span) -> String {
            guard s.kind == .task, let into = tasks.entering(task: s.object, at: s.start) else { return flow(s.flowIn) }
            return "[" + [into.enqueue, into.resume].filter { $0 != 0 }.map { "\($0)" }.joined(separator: ",") + "]"
        }
        func flowOut(_ i: TraceTimeline.Instant) -> String {
            guard i.kind == .taskEnqueue || i.kind == .taskResume else { return flow(i.flowOut) }
            return tasks.leaving(task: i.object, at: i.time, resume: i.kind == .taskResume).map { "\($0)" } ?? "0"
        }
        sink.write(
            "{\"tid\":\(row.threadID),\"name\":\(TraceChromeJSON.quote(row.name)),\"depth\":\(max(row.depth, 1)),"
                + "\"overwritten\":\(row.overwritten),\"spans\":[")
        for (index, s) in row.spans.enumerated() {
            sink.write(
                (index > 0 ? "," : "") + "[\(TraceChromeJSON.micros(s.start, origin)),\(TraceChromeJSON.micros(s.end, origin)),\(s.depth),"
                    + "\(TraceChromeJSON.quote(s.name)),\(TraceChromeJSON.quote(s.kind.label)),\(TraceChromeJSON.arguments(s.args)),"
                    + "\(flowIn(s)),\(s.closedByExport ? 1 : 0)]")
        }
        sink.write("],\"instants\":[")
        var separator = ""
        for i in row.instants where i.kind != .counter {
            defer { separator = "," }
            sink.write(
                separator + "[\(TraceChromeJSON.micros(i.time, origin)),\(TraceChromeJSON.quote(i.name)),"
                    + "\(TraceChromeJSON.quote(i.kind.label)),\(TraceChromeJSON.arguments(i.args)),\(flowOut(i))]")
        }
        sink.write("]}")
    }

    /// The page around its data: split at the `/*TRACE_DATA*/null` placeholder.
    static let template: (before: String, after: String) = {
        let parts = page.split(separator: "/*TRACE_DATA*/null", maxSplits: 1, omittingEmptySubsequences: false)
        return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
    }()

    static func escapeHTML(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "&": out += "&amp;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }

    static let page = #"""
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>TRACE_TITLE</title>
        <style>
        body{margin:0;font:12px system-ui,-apple-system,"DejaVu Sans",sans-serif;background:#fafafa;color:#222}
        header{padding:8px 12px;background:#263238;color:#eceff1;display:flex;gap:16px;align-items:center}
        header h1{font-size:15px;margin:0;font-weight:600}
        header button{font:inherit;padding:2px 10px}
        #legend{display:flex;gap:10px;flex-wrap:wrap;padding:6px 12px;border-bottom:1px solid #ddd;background:#fff}
        #legend span{display:inline-flex;align-items:center;gap:4px}
        #legend i{width:12px;height:12px;display:inline-block;border-radius:2px}
        #chart{position:relative;overflow:hidden;cursor:grab}
        svg text{pointer-events:none}
        #flight{padding:6px 12px;background:#fff8e1;border-bottom:1px solid #ddd;display:none}
        #flight pre{max-height:300px;overflow:auto;background:#fff;border:1px solid #ddd;padding:6px;font-size:11px}
        #tip{position:fixed;display:none;background:#fffde7;border:1px solid #999;padding:6px 8px;border-radius:4px;
         box-shadow:0 2px 6px rgba(0,0,0,.2);pointer-events:none;max-width:420px;white-space:pre-wrap;font-size:12px}
        </style></head>
        <body data-rows="0" data-task-rows="0" data-counter-rows="0">
        <header><h1 id="heading">TRACE_TITLE</h1><span id="summary"></span><button id="reset">Reset zoom</button>
        <span style="opacity:.7">wheel: zoom · drag: pan · hover: details</span></header>
        <div id="flight"></div>
        <div id="legend"></div>
        <div id="chart"></div>
        <div id="tip"></div>
        <script>
        "use strict";
        const TRACE = /*TRACE_DATA*/null;
        const COLORS = {"thread":"#cfd8dc","run-loop pass":"#90caf9","sleep":"#e0e0e0","dispatch item":"#a5d6a7",
          "operation":"#ffcc80","lock wait":"#ef9a9a","port message":"#ce93d8","mark":"#fff59d","task":"#80deea","interval":"#b39ddb"};
        const TICKS = {"run-loop phase":"#1e88e5","enqueue":"#2e7d32","operation":"#ef6c00","port send":"#8e24aa","mark":"#f9a825",
          "task enqueue":"#00838f","task resume":"#6a1b9a"};
        const TASKS = TRACE.tasks || [], COUNTERS = TRACE.counters || [], TASK_H = 22, COUNTER_H = 40, SECTION_H = 22;
        const LABEL_W = 190, LANE_H = 16, ROW_GAP = 8, AXIS_H = 24, NS = "http://www.w3.org/2000/svg";
        const chart = document.getElementById("chart"), tip = document.getElementById("tip");
        let width = Math.max(600, window.innerWidth), t0 = 0, t1 = Math.max(TRACE.duration, 1);

        function el(name, attrs, parent) {
          const e = document.createElementNS(NS, name);
          for (const k in attrs) e.setAttribute(k, attrs[k]);
          if (parent) parent.appendChild(e);
          return e;
        }
        function fmt(us) { return us >= 1000 ? (us / 1000).toFixed(3) + " ms" : us.toFixed(1) + " µs"; }
        function describe(name, kind, start, end, args) {
          let s = name + "\n" + kind + (end === undefined ? " at " + fmt(start) : ": " + fmt(end - start) + " from " + fmt(start));
          for (const k in args) if (k !== "kind") s += "\n" + k + ": " + args[k];
          return s;
        }
        function legend() {
          const box = document.getElementById("legend");
          for (const k in COLORS) box.insertAdjacentHTML("beforeend", '<span><i style="background:' + COLORS[k] + '"></i>' + k + "</span>");
          for (const k in TICKS) box.insertAdjacentHTML("beforeend", '<span><i style="background:' + TICKS[k] + ';width:3px"></i>' + k + "</span>");
        }
        function flight() {
          if (!TRACE.note && !TRACE.dump) return;
          const box = document.getElementById("flight");
          box.style.display = "block";
          const p = document.createElement("div"); p.textContent = TRACE.note || ""; box.appendChild(p);
          if (TRACE.dump) {
            const d = document.createElement("details"), s = document.createElement("summary"), pre = document.createElement("pre");
            s.textContent = "Thread dump"; pre.id = "thread-dump"; pre.textContent = TRACE.dump;
            d.appendChild(s); d.appendChild(pre); box.appendChild(d);
          }
        }
        function threadColor(tid) { return "hsl(" + ((tid * 47) % 360) + ",55%,72%)"; }
        function section(svg, y, text) {
          el("rect", {x: 0, y: y, width: width, height: SECTION_H, fill: "#cfd8dc"}, svg);
          el("text", {x: 8, y: y + 15, "font-weight": 600}, svg).textContent = text;
        }
        function draw() {
          chart.textContent = "";
          const plotW = width - LABEL_W - 10, x = t => LABEL_W + (t - t0) / (t1 - t0) * plotW;
          let y = AXIS_H;
          const tops = [];
          for (const row of TRACE.rows) { tops.push(y); y += row.depth * LANE_H + ROW_GAP * 2; }
          const taskTop = y;
          if (TASKS.length) y += SECTION_H + TASKS.length * TASK_H;
          const counterTop = y;
          if (COUNTERS.length) y += SECTION_H + COUNTERS.length * COUNTER_H;
          const svg = el("svg", {width: width, height: y + 4, id: "timeline"}, chart);
          const clip = el("clipPath", {id: "plot"}, el("defs", {}, svg));
          el("rect", {x: LABEL_W, y: 0, width: plotW, height: y}, clip);
          // Time axis.
          const axis = el("g", {"class": "axis"}, svg);
          const step = Math.pow(10, Math.floor(Math.log10((t1 - t0) / 6 || 1)));
          const nice = [1, 2, 5, 10].map(m => m * step).find(s => (t1 - t0) / s <= 10) || step * 10;
          for (let t = Math.ceil(t0 / nice) * nice; t <= t1; t += nice) {
            el("line", {x1: x(t), x2: x(t), y1: AXIS_H - 6, y2: y, stroke: "#e6e6e6"}, axis);
            if (x(t) + 70 < width) el("text", {x: x(t) + 2, y: AXIS_H - 10, fill: "#555"}, axis).textContent = fmt(t);
          }
          const pos = {};
          TRACE.rows.forEach((row, r) => {
            const top = tops[r], h = row.depth * LANE_H + ROW_GAP;
            const g = el("g", {"class": "row", "data-thread": row.name, "data-tid": row.tid}, svg);
            el("rect", {x: 0, y: top, width: width, height: h + ROW_GAP, fill: r % 2 ? "#f3f5f7" : "#ffffff"}, g);
            el("text", {x: 8, y: top + 14, "font-weight": 600}, g).textContent = row.name;
            el("text", {x: 8, y: top + 28, fill: "#777"}, g).textContent = "tid " + row.tid + " · " + row.spans.length + " spans" + (row.overwritten ? " · " + row.overwritten + " dropped" : "");
            const plot = el("g", {"clip-path": "url(#plot)"}, g);
            // A span under one pixel wide that starts where the previous one at its depth was drawn adds
            // nothing visible: skipped, so a large trace draws at most about one element per pixel.
            const drawnTo = [];
            for (const s of row.spans) {
              const [start, end, depth, name, kind, args, flow, unended] = s;
              if (end < t0 || start > t1) continue;
              const x0 = x(start), w = Math.max(1, x(end) - x0), yy = top + ROW_GAP / 2 + depth * LANE_H;
              if (x(end) - x0 < 1 && x0 < (drawnTo[depth] ?? -1) + 1) continue;
              drawnTo[depth] = x0 + w;
              const rect = el("rect", {x: x0, y: yy, width: w, height: LANE_H - 2, rx: 2, fill: COLORS[kind] || "#b0bec5", stroke: "rgba(0,0,0,.25)"}, plot);
              if (unended) rect.setAttribute("stroke-dasharray", "4 2");
              rect.dataset.tip = describe(name, kind, start, end, args) + (unended ? "\n(no end recorded: drawn to the thread's last event)" : "");
              if (w > 30) { const t = el("text", {x: x0 + 3, y: yy + LANE_H - 5, "font-size": 10}, plot); t.textContent = name.length * 6 > w ? name.slice(0, Math.max(1, Math.floor(w / 6) - 1)) + "…" : name; }
              for (const f of [].concat(flow)) if (f) pos[f] = Object.assign(pos[f] || {}, {to: [x0, yy + LANE_H / 2]});
            }
            let tickAt = -2;
            for (const i of row.instants) {
              const [time, name, kind, args, flow] = i;
              if (time < t0 || time > t1) continue;
              const xx = x(time), yy = top + ROW_GAP / 2;
              if (xx < tickAt + 1 && !flow) continue;
              tickAt = xx;
              const tick = el("rect", {x: xx - 1, y: yy, width: 3, height: row.depth * LANE_H, fill: TICKS[kind] || "#555", opacity: .55}, plot);
              tick.dataset.tip = describe(name, kind, time, undefined, args);
              if (flow) pos[flow] = Object.assign(pos[flow] || {}, {from: [xx, yy + 4]});
            }
          });
          if (TASKS.length) {
            section(svg, taskTop, "Swift tasks (jobs on ThreadKit executors)");
            TASKS.forEach((task, r) => {
              const top = taskTop + SECTION_H + r * TASK_H;
              const g = el("g", {"class": "task-row", "data-task": task.id}, svg);
              el("rect", {x: 0, y: top, width: width, height: TASK_H, fill: r % 2 ? "#f4f9f9" : "#ffffff"}, g);
              el("text", {x: 8, y: top + 15, "font-weight": 600}, g).textContent =
                task.more ? task.more + " more tasks (their jobs are on the thread rows)" : "task " + task.id + (task.priority ? " · " + task.priority : "");
              const plot = el("g", {"clip-path": "url(#plot)"}, g);
              for (const [start, end, tid, executor, enqueued] of task.jobs) {
                if (end < t0 || start > t1) continue;
                if (enqueued >= 0 && enqueued < start) {
                  el("line", {x1: x(enqueued), x2: x(start), y1: top + TASK_H / 2, y2: top + TASK_H / 2, stroke: "#00838f", "stroke-dasharray": "3 2"}, plot);
                }
                const x0 = x(start), w = Math.max(1, x(end) - x0);
                const rect = el("rect", {x: x0, y: top + 3, width: w, height: TASK_H - 6, rx: 2, fill: threadColor(tid), stroke: "rgba(0,0,0,.3)"}, plot);
                rect.dataset.tip = "task " + task.id + " (" + task.priority + ")\njob on thread " + tid + ": " + fmt(end - start) + " from " + fmt(start) +
                  "\nexecutor: " + executor + (enqueued >= 0 ? "\nwaited " + fmt(start - enqueued) + " after its enqueue" : "");
              }
            });
          }
          if (COUNTERS.length) {
            section(svg, counterTop, "Counters");
            COUNTERS.forEach((counter, r) => {
              const top = counterTop + SECTION_H + r * COUNTER_H, pts = counter.points;
              const g = el("g", {"class": "counter-row", "data-counter": counter.name}, svg);
              el("rect", {x: 0, y: top, width: width, height: COUNTER_H, fill: r % 2 ? "#f9f6fc" : "#ffffff"}, g);
              let lo = Infinity, hi = -Infinity;
              for (const [, v] of pts) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
              el("text", {x: 8, y: top + 15, "font-weight": 600}, g).textContent = counter.name;
              el("text", {x: 8, y: top + 29, fill: "#777"}, g).textContent = pts.length + " values · " + lo + " … " + hi;
              const yv = v => top + COUNTER_H - 4 - (hi > lo ? (v - lo) / (hi - lo) : 0.5) * (COUNTER_H - 8);
              let d = "";
              pts.forEach(([t, v], i) => { d += (i ? "H" + x(t) + "V" + yv(v) : "M" + x(t) + "," + yv(v)); });
              if (pts.length) d += "H" + x(TRACE.duration);
              const path = el("path", {d: d, fill: "none", stroke: "#6a1b9a", "stroke-width": 1.5}, el("g", {"clip-path": "url(#plot)"}, g));
              path.dataset.tip = counter.name + "\n" + pts.length + " values from " + lo + " to " + hi;
            });
          }
          const flows = el("g", {"clip-path": "url(#plot)", "class": "flows"}, svg);
          for (const id in pos) {
            const f = pos[id]; if (!f.from || !f.to) continue;
            const [ax, ay] = f.from, [bx, by] = f.to, mx = (ax + bx) / 2;
            el("path", {d: `M${ax},${ay} C${mx},${ay} ${mx},${by} ${bx},${by}`, fill: "none", stroke: "#2e7d32", "stroke-width": 1, opacity: .45}, flows);
          }
          const drawn = svg.querySelectorAll("g.row").length;
          document.body.dataset.rows = drawn;
          document.body.dataset.taskRows = svg.querySelectorAll("g.task-row").length;
          document.body.dataset.counterRows = svg.querySelectorAll("g.counter-row").length;
          // Where the browser laid each row out (read back by the rendering test).
          document.body.dataset.rowTops = Array.from(svg.querySelectorAll("g.row > rect:first-child"), r => Math.round(r.getBoundingClientRect().top)).join(",");
          document.title = "ThreadKit trace: " + drawn + " rows";
          document.getElementById("summary").textContent = TRACE.rows.length + " threads · " + (TASKS.length ? TASKS.length + " tasks · " : "") + fmt(TRACE.duration) + " · showing " + fmt(t0) + " – " + fmt(t1);
        }
        chart.addEventListener("mousemove", e => {
          const t = e.target.dataset && e.target.dataset.tip;
          if (t && !drag) { tip.style.display = "block"; tip.textContent = t; tip.style.left = Math.min(e.clientX + 12, window.innerWidth - 430) + "px"; tip.style.top = (e.clientY + 12) + "px"; }
          else tip.style.display = "none";
          if (drag) { const dt = (e.clientX - drag.x) / (width - LABEL_W - 10) * (drag.t1 - drag.t0); t0 = drag.t0 - dt; t1 = drag.t1 - dt; draw(); }
        });
        let drag = null;
        chart.addEventListener("mousedown", e => { drag = {x: e.clientX, t0: t0, t1: t1}; chart.style.cursor = "grabbing"; });
        window.addEventListener("mouseup", () => { drag = null; chart.style.cursor = "grab"; });
        chart.addEventListener("wheel", e => {
          e.preventDefault();
          const f = Math.exp(e.deltaY * 0.002), at = t0 + (e.clientX - LABEL_W) / (width - LABEL_W - 10) * (t1 - t0);
          t0 = at - (at - t0) * f; t1 = at + (t1 - at) * f; if (t1 - t0 < 0.01) t1 = t0 + 0.01; draw();
        }, {passive: false});
        document.getElementById("reset").onclick = () => { t0 = 0; t1 = Math.max(TRACE.duration, 1); draw(); };
        window.addEventListener("resize", () => { width = Math.max(600, window.innerWidth); draw(); });
        legend();
        flight();
        draw();
        </script>
        </body></html>
        """#
}
