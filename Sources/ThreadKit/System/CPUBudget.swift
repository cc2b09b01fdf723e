// CPUBudget: how many CPUs this process may actually use, which sets the dispatch pool's width
// (docs/DispatchPool.md, "Width"). Two limits, as a container or `taskset` sets them:
//
// - the affinity mask of the calling thread (`sched_getaffinity`; a new thread inherits it), and
// - the cgroup CPU quota: cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), or v1
//   `cpu.cfs_quota_us` / `cpu.cfs_period_us`, of this process's cgroup and every ancestor (a limit
//   set on a parent applies to its children); the smallest quota/period, rounded up, counts.
//
// The budget is min(online CPUs, affinity count, ceil(quota)), at least 1: what Go's runtime
// (GOMAXPROCS since Go 1.25) and the JVM/.NET container support compute. Stateless; any thread.
import CThreadKit
import Glibc

enum CPUBudget {
    /// Whether this process may use one CPU only, decided when first asked (the pool's start, or
    /// the first spin). There a thread that spins waiting for another holds the very CPU the other
    /// needs, so every spin budget is one `sched_yield()` instead (SpinWait), and the run loop's
    /// descriptor poll window is skipped.
    static let isSingleCPU = usableCPUs() == 1

    /// The CPUs the calling thread may run on now: the affinity mask and the cgroup quota.
    static func usableCPUs() -> Int {
        var budget = onlineCPUs()
        if let affinity = affinityCount() { budget = min(budget, affinity) }
        if let quota = cgroupQuota() { budget = min(budget, quota) }
        return max(1, budget)
    }

    /// The width the dispatch pool sizes itself to: `TK_CPU_BUDGET` when set to a whole number from
    /// 1 to 4,096 (for testing: it makes the pool run as wide as on a machine with that many CPUs,
    /// oversubscribed on the real ones; spin decisions still follow the real CPUs), otherwise
    /// `usableCPUs()`. A malformed value is said once on stderr and ignored.
    static func poolWidth() -> Int {
        guard let raw = getenv("TK_CPU_BUDGET") else { return usableCPUs() }
        let text = String(cString: raw)
        guard let value = parseBudget(text) else {
            SystemCall.report(budgetWarning(text, usable: usableCPUs()))
            return usableCPUs()
        }
        return value
    }

    /// `TK_CPU_BUDGET`'s value: ASCII digits only (no sign, no spaces) making a number from 1 to
    /// 4,096; nil otherwise.
    static func parseBudget(_ text: String) -> Int? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.count <= 8, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let value = Int(text), (1...4_096).contains(value)
        else { return nil }
        return value
    }

    /// The line said for a malformed `TK_CPU_BUDGET`: the value as written, its control characters
    /// as '?', cut at 80 Unicode scalars with "..." (as TK_DIAGNOSTICS's items).
    static func budgetWarning(_ text: String, usable: Int) -> String {
        var shown = String.UnicodeScalarView()
        for scalar in text.unicodeScalars.prefix(80) { shown.append(scalar.value < 0x20 || scalar.value == 0x7f ? "?" : scalar) }
        let cut = text.unicodeScalars.count > 80 ? "..." : ""
        return "ThreadKit: TK_CPU_BUDGET=\(String(shown))\(cut) is not a whole number from 1 to 4096 "
            + "(digits only); ignored (the pool sizes itself to the \(usable) CPU(s) this process may use)."
    }

    static func onlineCPUs() -> Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }

    /// CPUs in the calling thread's affinity mask (nil where it cannot be read).
    static func affinityCount() -> Int? {
        let count = Int(tk_affinity_count())
        return count > 0 ? count : nil
    }

    /// The cgroup CPU quota in whole CPUs (rounded up), or nil where none is set or readable.
    static func cgroupQuota() -> Int? {
        guard let membership = SystemCall.readSmallFile("/proc/self/cgroup", limit: 8192) else { return nil }
        var best: Int?
        for line in membership.split(separator: "\n") {
            // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            let controllers = fields[1].split(separator: ",")
            let path = String(fields[2])
            var candidates: [Int?] = []
            if fields[0] == "0" && fields[1].isEmpty {
                for dir in ancestry(path) {
                    candidates.append(SystemCall.readSmallFile("/sys/fs/cgroup\(dir)/cpu.max").flatMap(parseCPUMax))
                    candidates.append(SystemCall.readSmallFile("/sys/fs/cgroup/unified\(dir)/cpu.max").flatMap(parseCPUMax))
                }
            } else if controllers.contains("cpu") {
                for mount in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"] {
                    for dir in ancestry(path) {
                        let quota = SystemCall.readSmallFile("\(mount)\(dir)/cpu.cfs_quota_us")
                        let period = SystemCall.readSmallFile("\(mount)\(dir)/cpu.cfs_period_us")
                        if let quota, let period { candidates.append(parseCFS(quota: quota, period: period)) }
                    }
                }
            }
            for case let cpus? in candidates { best = min(best ?? cpus, cpus) }
        }
        return best
    }

    /// `path` and each of its ancestors up to the root ("/a/b" → "/a/b", "/a", ""), as directory
    /// suffixes.
    static func ancestry(_ path: String) -> [String] {
        var parts = path.split(separator: "/").map(String.init)
        var result: [String] = []
        while true {
            result.append(parts.isEmpty ? "" : "/" + parts.joined(separator: "/"))
            if parts.isEmpty { return result }
            parts.removeLast()
        }
    }

    /// cgroup v2 `cpu.max`: "200000 100000" → 2; "150000 100000" → 2 (rounded up); "max 100000" → nil.
    static func parseCPUMax(_ text: String) -> Int? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 2, let quota = Int(fields[0]), let period = Int(fields[1]) else { return nil }
        return cpus(quota: quota, period: period)
    }

    /// cgroup v1: quota -1 means none.
    static func parseCFS(quota: String, period: String) -> Int? {
        guard let q = Int(quota.filter { !$0.isWhitespace }), let p = Int(period.filter { !$0.isWhitespace }) else { return nil }
        return cpus(quota: q, period: p)
    }

    private static func cpus(quota: Int, period: Int) -> Int? {
        guard quota > 0, period > 0 else { return nil }
        return max(1, (quota + period - 1) / period)
    }
}
