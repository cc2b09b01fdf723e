// Scaling: the `scaling` group's driver (issue 12). For each CPU count of 1, 2, 4, 8 and 16 it
// re-executes this binary as `tkbench scaling-child CPUS FILE ROUNDS` with its affinity set to the
// first CPUS CPUs the benchmark may use (set on the spawning thread just before posix_spawn, so the
// child and both its pools start with that mask and size themselves to it); counts above the
// machine's are skipped and said so. The child (ScalingRows) writes one line per measurement; the
// driver prints the table and each side's speed-up curve, and writes scaling.csv and scaling.svg
// (hand-written SVG: throughput against CPUs, ours against the incumbent, one panel per row), and
// the counters the child read per 1,000 items (context switches, futex calls, pool lock; issue 24).
// Driver thread only.
import Foundation
import Glibc

/// One measurement of one side at one CPU count.
struct ScalingResult {
    let row: String
    let cpus: Int
    /// "ours" or "theirs".
    let side: String
    let contender: String
    let value: Double
    /// How `value` reads: "M/s" (higher is better) or a time ("ns", "µs", "ms"; lower is better),
    /// or "threads".
    let unit: String
    let target: String
    /// What the side cost per 1,000 items (context switches, futex calls, pool lock), where the
    /// child measured it; nil for rows that count no items (and in lines written before issue 24).
    let counters: ScalingCounters?

    var higherIsBetter: Bool { unit.hasSuffix("/s") }

    /// The line the child writes (tab-separated; names never contain tabs): 7 fields, then the 4 of
    /// the counters when there are any ("n/a" for one the side cannot read).
    var line: String {
        ([row, "\(cpus)", side, contender, "\(value)", unit, target] + (counters?.fields ?? [])).joined(separator: "\t")
    }

    init(
        row: String, cpus: Int, side: String, contender: String, value: Double, unit: String, target: String,
        counters: ScalingCounters? = nil
    ) {
        (self.row, self.cpus, self.side, self.contender, self.value, self.unit, self.target) = (
            row, cpus, side, contender, value, unit, target
        )
        self.counters = counters
    }

    /// Reads a line of 7 fields (no counters) or 7 + ScalingCounters.fieldCount.
    init?(line: Substring) {
        let f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard f.count == 7 || f.count == 7 + ScalingCounters.fieldCount, let cpus = Int(f[1]), let value = Double(f[4]) else { return nil }
        self.init(
            row: f[0], cpus: cpus, side: f[2], contender: f[3], value: value, unit: f[5], target: f[6],
            counters: f.count > 7 ? ScalingCounters(fields: Array(f[7...])) : nil)
    }
}

/// Per 1,000 items of one side of one row (issue 24, item 7): context switches of the whole
/// process (getrusage: voluntary + involuntary), ThreadKit's FUTEX_WAIT and FUTEX_WAKE calls
/// (SystemCall's process-wide counters) and acquisitions of the pool's one lock. nil where the side
/// cannot be read: the incumbents' futex calls happen inside glibc and libdispatch, which count
/// nothing, and they have no pool lock of ours.
struct ScalingCounters {
    var contextSwitches: Double?
    var futexWaits: Double?
    var futexWakes: Double?
    var poolLock: Double?

    static let fieldCount = 4
    static let csvHeader = "cs_per_1k,futex_waits_per_1k,futex_wakes_per_1k,pool_lock_per_1k"

    init(contextSwitches: Double?, futexWaits: Double?, futexWakes: Double?, poolLock: Double?) {
        (self.contextSwitches, self.futexWaits, self.futexWakes, self.poolLock) = (contextSwitches, futexWaits, futexWakes, poolLock)
    }

    /// "n/a" (or anything not a number) reads as nil.
    init(fields: [String]) {
        let v = fields.map(Double.init) + Array(repeating: nil, count: max(0, ScalingCounters.fieldCount - fields.count))
        self.init(contextSwitches: v[0], futexWaits: v[1], futexWakes: v[2], poolLock: v[3])
    }

    var all: [Double?] { [contextSwitches, futexWaits, futexWakes, poolLock] }
    var fields: [String] { all.map { $0.map { "\($0)" } ?? "n/a" } }

    private static func cell(_ value: Double?) -> String {
        guard let value else { return "n/a" }
        return String(format: value >= 100 ? "%.0f" : value >= 10 ? "%.1f" : "%.2f", value)
    }
    /// "cs 1.23, futex 4.5 w + 6.7 k, lock 1002" (per 1,000 items).
    var summary: String {
        let futex =
            futexWaits == nil && futexWakes == nil ? "n/a" : "\(ScalingCounters.cell(futexWaits)) w + \(ScalingCounters.cell(futexWakes)) k"
        return "cs \(ScalingCounters.cell(contextSwitches)), futex \(futex)"
            + (poolLock.map { ", pool lock \(ScalingCounters.cell($0))" } ?? "")
    }
    /// Table cells: context switches, futex waits + wakes, pool lock.
    var cells: [String] {
        let futex =
            futexWaits == nil && futexWakes == nil ? "n/a" : "\(ScalingCounters.cell(futexWaits)) + \(ScalingCounters.cell(futexWakes))"
        return [ScalingCounters.cell(contextSwitches), futex, poolLock.map { ScalingCounters.cell($0) } ?? "—"]
    }
}

enum Scaling {
    static let cpuCounts = [1, 2, 4, 8, 16]

    /// glibc's sched_getaffinity / sched_setaffinity (not imported: they need _GNU_SOURCE).
    private typealias AffinityCall = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32
    private static func affinityCall(_ name: String) -> AffinityCall? {
        dlsym(nil, name).map { unsafeBitCast($0, to: AffinityCall.self) } // nil: RTLD_DEFAULT
    }
    private static func sched_getaffinity(_ pid: pid_t, _ size: Int, _ set: UnsafeMutablePointer<cpu_set_t>) -> Int32 {
        affinityCall("sched_getaffinity")?(pid, size, set) ?? -1
    }
    private static func sched_setaffinity(_ pid: pid_t, _ size: Int, _ set: UnsafeMutablePointer<cpu_set_t>) -> Int32 {
        affinityCall("sched_setaffinity")?(pid, size, set) ?? -1
    }

    /// The CPUs this process may run on, in order.
    static func allowedCPUs() -> [Int] {
        var set = cpu_set_t()
        guard sched_getaffinity(0, MemoryLayout<cpu_set_t>.size, &set) == 0 else {
            return Array(0..<ProcessInfo.processInfo.activeProcessorCount)
        }
        return withUnsafeBytes(of: &set) { bytes in
            (0..<(bytes.count * 8)).filter { bytes[$0 / 8] & (1 << UInt8($0 % 8)) != 0 }
        }
    }

    /// Sets the calling thread's affinity to `cpus` (0 on success).
    @discardableResult
    static func pin(_ cpus: [Int]) -> Int32 {
        var set = cpu_set_t()
        withUnsafeMutableBytes(of: &set) { bytes in
            for cpu in cpus where cpu / 8 < bytes.count { bytes[cpu / 8] |= 1 << UInt8(cpu % 8) }
        }
        return sched_setaffinity(0, MemoryLayout<cpu_set_t>.size, &set)
    }

    /// Runs the group: one child per CPU count, then the table, the curves, the CSV and the SVG.
    static func run(rounds: Int, directory: String) {
        let allowed = allowedCPUs()
        var results: [ScalingResult] = []
        print("## scaling: each row pinned to 1, 2, 4, 8, 16 CPUs (this machine lets us use \(allowed.count))\n")
        for count in cpuCounts {
            guard count <= allowed.count else {
                print("- \(count) CPUs: skipped (the machine has \(allowed.count))")
                continue
            }
            let file = "\(NSTemporaryDirectory())tkbench-scaling-\(getpid())-\(count).tsv"
            print("- \(count) CPUs: running (CPUs \(allowed.prefix(count).map(String.init).joined(separator: ",")))…")
            fflush(nil)
            let status = spawnPinned(Array(allowed.prefix(count)), ["scaling-child", "\(count)", file, "\(rounds)"])
            let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            unlink(file)
            let lines = text.split(separator: "\n").compactMap(ScalingResult.init(line:))
            if status != 0 { print("  (child exited with status \(status); \(lines.count) results kept)") }
            results += lines
        }
        print("")
        printTable(results)
        printCounters(results)
        printCurves(results)
        let csv = "\(directory)/scaling.csv"
        let svg = "\(directory)/scaling.svg"
        writeCSV(results, to: csv)
        writeSVG(results, to: svg)
        print("wrote \(csv) and \(svg)\n")
    }

    /// posix_spawn of this executable with the calling thread pinned to `cpus` meanwhile (a child
    /// inherits the spawning thread's mask); waits for it and returns its exit status.
    static func spawnPinned(_ cpus: [Int], _ arguments: [String]) -> Int32 {
        let saved = allowedCPUs()
        pin(cpus)
        defer { pin(saved) }
        let argv = ["tkbench"] + arguments
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/proc/self/exe", nil, nil, &cArgs, environ) == 0 else { return -1 }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status
    }

    // MARK: Output

    private static func rows(_ results: [ScalingResult]) -> [String] {
        var seen: [String] = []
        for r in results where !seen.contains(r.row) { seen.append(r.row) }
        return seen
    }

    static func format(_ value: Double, _ unit: String) -> String {
        switch unit {
        case "threads": return String(format: "%.0f threads", value)
        case "M/s": return String(format: "%.3f M/s", value)
        default: return String(format: value >= 100 ? "%.0f %@" : "%.2f %@", value, unit)
        }
    }

    /// Ours over theirs as "how many times better": throughput ratio, or time ratio inverted.
    static func advantage(_ ours: ScalingResult, _ theirs: ScalingResult) -> String {
        guard ours.value > 0, theirs.value > 0, ours.unit != "threads" else { return "—" }
        return ours.higherIsBetter
            ? String(format: "%.2f× their throughput", ours.value / theirs.value)
            : String(format: "%.2f× their time", ours.value / theirs.value)
    }

    static func printTable(_ results: [ScalingResult]) {
        print("| row | CPUs | ours | theirs | ours vs theirs | target |")
        print("|---|---|---|---|---|---|")
        for row in rows(results) {
            let mine = results.filter { $0.row == row }
            var first = true
            for cpus in cpuCounts {
                let pair = mine.filter { $0.cpus == cpus }
                let ours = pair.filter { $0.side == "ours" }
                let theirs = pair.filter { $0.side == "theirs" }
                guard !ours.isEmpty || !theirs.isEmpty else { continue }
                // Rows with two measurements per side (wall time and threads) print both.
                for i in 0..<max(ours.count, theirs.count) {
                    let o = i < ours.count ? ours[i] : nil
                    let t = i < theirs.count ? theirs[i] : nil
                    let ratio = (o != nil && t != nil) ? advantage(o!, t!) : "—"
                    let name = first ? "\(row) (\(o?.contender ?? "?") vs \(t?.contender ?? "?"))" : ""
                    print(
                        "| \(name) | \(cpus) | \(o.map { format($0.value, $0.unit) } ?? "—") | \(t.map { format($0.value, $0.unit) } ?? "—") | \(ratio) | \(first ? (o?.target ?? "") : "") |"
                    )
                    first = false
                }
            }
        }
        print("")
    }

    /// The counters of every row and side that has them (per 1,000 items).
    static func printCounters(_ results: [ScalingResult]) {
        let counted = results.filter { $0.counters != nil }
        guard !counted.isEmpty else { return }
        print(
            "Per 1,000 items: context switches of the process (getrusage), ThreadKit's futex calls (waits + wakes; "
                + "n/a for the incumbents: not countable in-process), our pool lock's acquisitions:\n")
        print("| row | CPUs | side | context switches | futex calls (w + k) | pool lock |")
        print("|---|---|---|---|---|---|")
        for row in rows(counted) {
            var first = true
            for cpus in cpuCounts {
                for r in counted where r.row == row && r.cpus == cpus {
                    print(
                        "| \(first ? row : "") | \(cpus) | \(r.side) (\(r.contender)) | " + r.counters!.cells.joined(separator: " | ")
                            + " |")
                    first = false
                }
            }
        }
        print("")
    }

    /// Each side's speed-up over its own 1-CPU figure (throughput ratio, or time ratio inverted).
    static func printCurves(_ results: [ScalingResult]) {
        print("Speed-up over the same side's 1-CPU figure (×):\n")
        print("| row | side | " + cpuCounts.map { "\($0) CPU" }.joined(separator: " | ") + " |")
        print("|---|---|" + cpuCounts.map { _ in "---" }.joined(separator: "|") + "|")
        for row in rows(results) {
            for side in ["ours", "theirs"] {
                let series = results.filter { $0.row == row && $0.side == side && $0.unit != "threads" }
                guard let base = series.first(where: { $0.cpus == 1 }), base.value > 0 else { continue }
                let cells = cpuCounts.map { cpus -> String in
                    guard let r = series.first(where: { $0.cpus == cpus }), r.value > 0 else { return "—" }
                    return String(format: "%.2f", r.higherIsBetter ? r.value / base.value : base.value / r.value)
                }
                print("| \(row) | \(side) (\(base.contender)) | " + cells.joined(separator: " | ") + " |")
            }
        }
        print("")
    }

    static func writeCSV(_ results: [ScalingResult], to path: String) {
        func quoted(_ s: String) -> String { "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
        // The counters' columns come last (empty where a row has none, "n/a" where a side cannot
        // read one), so readers of the first six columns are unaffected.
        var text = "row,cpus,side,contender,value,unit,\(ScalingCounters.csvHeader)\n"
        for r in results {
            let counters = r.counters?.fields ?? Array(repeating: "", count: ScalingCounters.fieldCount)
            text +=
                ([quoted(r.row), "\(r.cpus)", r.side, quoted(r.contender), "\(r.value)", quoted(r.unit)] + counters)
                .joined(separator: ",") + "\n"
        }
        try? text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// Small multiples: one panel per row, throughput (or 1/time, as "runs per second") against
    /// CPUs on a log2 axis, ours solid blue, theirs dashed orange, each panel scaled to its maximum.
    static func writeSVG(_ results: [ScalingResult], to path: String) {
        let names = rows(results).filter { row in results.contains { $0.row == row && $0.unit != "threads" } }
        let columns = 3
        let panelW = 300.0
        let panelH = 190.0
        let pad = 40.0
        let rowsCount = (names.count + columns - 1) / columns
        let width = Double(columns) * panelW
        let height = Double(max(1, rowsCount)) * panelH + 30
        var svg =
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" font-family=\"sans-serif\" font-size=\"10\">\n"
        svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        svg +=
            "<text x=\"10\" y=\"18\" font-size=\"13\">ThreadKit (blue, solid) vs incumbent (orange, dashed): throughput against CPUs (time rows as 1/time)</text>\n"
        func escape(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(
                of: ">", with: "&gt;")
        }
        for (index, row) in names.enumerated() {
            let x0 = Double(index % columns) * panelW
            let y0 = 30 + Double(index / columns) * panelH
            let plotX = x0 + pad
            let plotY = y0 + 22
            let plotW = panelW - pad - 15
            let plotH = panelH - 55
            let series = results.filter { $0.row == row && $0.unit != "threads" }
            func throughput(_ r: ScalingResult) -> Double { r.higherIsBetter ? r.value : (r.value > 0 ? 1 / r.value : 0) }
            let top = max(series.map(throughput).max() ?? 1, 1e-12)
            svg += "<text x=\"\(x0 + 8)\" y=\"\(y0 + 14)\" font-size=\"11\">\(escape(String(row.prefix(48))))</text>\n"
            svg += "<rect x=\"\(plotX)\" y=\"\(plotY)\" width=\"\(plotW)\" height=\"\(plotH)\" fill=\"none\" stroke=\"#999\"/>\n"
            for (i, cpus) in cpuCounts.enumerated() {
                let x = plotX + plotW * Double(i) / Double(cpuCounts.count - 1)
                svg += "<text x=\"\(x - 4)\" y=\"\(plotY + plotH + 12)\">\(cpus)</text>\n"
            }
            svg += "<text x=\"\(plotX + plotW / 2 - 12)\" y=\"\(plotY + plotH + 26)\">CPUs</text>\n"
            let unit = series.first.map { $0.higherIsBetter ? $0.unit : "1/\($0.unit)" } ?? ""
            svg += "<text x=\"\(x0 + 2)\" y=\"\(plotY + 8)\">\(String(format: "%.3g", top))</text>\n"
            svg += "<text x=\"\(x0 + 2)\" y=\"\(plotY + 20)\">\(escape(unit))</text>\n"
            svg += "<text x=\"\(x0 + 2)\" y=\"\(plotY + plotH)\">0</text>\n"
            for (side, color, dash) in [("ours", "#1f5fbf", ""), ("theirs", "#e07b00", " stroke-dasharray=\"5,3\"")] {
                let points = cpuCounts.enumerated().compactMap { i, cpus -> String? in
                    guard let r = series.first(where: { $0.side == side && $0.cpus == cpus }) else { return nil }
                    let x = plotX + plotW * Double(i) / Double(cpuCounts.count - 1)
                    let y = plotY + plotH - plotH * throughput(r) / top
                    return String(format: "%.1f,%.1f", x, y)
                }
                guard !points.isEmpty else { continue }
                svg +=
                    "<polyline points=\"\(points.joined(separator: " "))\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"\(dash)/>\n"
                for p in points {
                    let xy = p.split(separator: ",")
                    svg += "<circle cx=\"\(xy[0])\" cy=\"\(xy[1])\" r=\"2.5\" fill=\"\(color)\"/>\n"
                }
            }
        }
        svg += "</svg>\n"
        try? svg.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
