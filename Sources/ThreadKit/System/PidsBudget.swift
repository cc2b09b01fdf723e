// PidsBudget: how many more tasks (threads or processes) the pids cgroups around this process let
// it create, so that the dispatch pool never takes the last of them (issue 49, finding 6: under
// pids.max=200, 10,000 blocked items once made the pool take all 200, and nothing else in the
// cgroup could start a thread or a process). Every level of the process's pids cgroup, v2
// (`pids.max` and `pids.current` beside `cgroup.procs` of the unified hierarchy) or v1 (the `pids`
// controller's own mount), is read, up to the root: the tightest level decides.
//
// The pool asks only before starting a thread beyond its width (one that replaces blocked
// workers), and then at most once per 100 ms (`PoolScheduler.takePidsRoom` counts its own starts
// against the last reading): a few small reads then, none on any other path. Where no limit is set or readable,
// every start is allowed. Stateless apart from the cgroup directories, found once. Any thread.
import Glibc

enum PidsBudget {
    /// The tasks left free below a limit: a quarter of it, and at least 8.
    static func reserve(limit: Int) -> Int { max(8, limit / 4) }

    /// Whether one more task leaves each level's reserve free. `levels` are (limit, current) pairs;
    /// nil limits ("max") do not bind. Pure: the rule the tests drive.
    static func allowsOneMore(_ levels: [(limit: Int?, current: Int)]) -> Bool { headroom(levels) >= 1 }

    /// How many more tasks this process may start and leave every level its reserve: the least
    /// over the levels with a limit, never below 0; `Int.max` when no limit binds.
    static func headroom(_ levels: [(limit: Int?, current: Int)]) -> Int {
        levels.reduce(Int.max) { room, level in
            guard let limit = level.limit else { return room }
            return min(room, max(0, limit - reserve(limit: limit) - level.current))
        }
    }

    /// `headroom` of the pids cgroups around this process, read now.
    static func headroom() -> Int { headroom(readLevels()) }

    static func readLevels() -> [(limit: Int?, current: Int)] {
        directories.map { dir -> (limit: Int?, current: Int) in
            let limit = SystemCall.readSmallFile(dir + "/pids.max", limit: 64).flatMap(parseLimit)
            let current = SystemCall.readSmallFile(dir + "/pids.current", limit: 64).flatMap(parseCount) ?? 0
            return (limit, current)
        }
    }

    /// Whether this process may start one more thread and leave every pids cgroup around it its
    /// reserve; with the tightest level, for a message.
    static func check() -> (allowed: Bool, limit: Int?, current: Int) {
        let levels = readLevels()
        let tightest = levels.filter { $0.limit != nil }.min { ($0.limit! - $0.current) < ($1.limit! - $1.current) }
        return (allowsOneMore(levels), tightest?.limit, tightest?.current ?? 0)
    }

    /// "max\n" → nil, "200\n" → 200.
    static func parseLimit(_ text: String) -> Int? { parseCount(text) }

    static func parseCount(_ text: String) -> Int? {
        Int(text.filter { !$0.isWhitespace })
    }

    /// The pids cgroup directories of this process and of each ancestor that has pids files.
    static let directories: [String] = {
        guard let membership = SystemCall.readSmallFile("/proc/self/cgroup", limit: 8192) else { return [] }
        var result: [String] = []
        for line in membership.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            let path = String(fields[2])
            var mounts: [String] = []
            if fields[0] == "0" && fields[1].isEmpty {
                mounts = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            } else if fields[1].split(separator: ",").contains("pids") {
                mounts = ["/sys/fs/cgroup/pids"]
            }
            for mount in mounts {
                for dir in CPUBudget.ancestry(path) where access(mount + dir + "/pids.max", R_OK) == 0 {
                    result.append(mount + dir)
                }
            }
        }
        return result
    }()
}
