// A crowd of blocked items (issue 49, finding 6): 2,000 global-queue items blocked in read(2) once
// made the pool start a thread per item up to its cap of 255, and under a pids cgroup limit take
// every pid left, so that the process could not even spawn `/bin/true`. In a child process (the
// pool must be new, and the cgroup test moves the whole process): the peak thread count, read from
// /proc/self/status, stays within the crowd rule (PoolScheduler.crowdLimit and crowdInterval);
// under pids.max the pool leaves the reserve (PidsBudget) and says so once; every item runs once
// released. Judged by the kernel's counts, posix_spawn and the items' own count.
import Foundation
import XCTest

@testable import ThreadKit

final class DispatchPoolCrowdTests: XCTestCase {
    private typealias Scheduler = PoolScheduler<PoolWorker>

    func testABlockedCrowdGrowsThePoolOnlyByTheCrowdRule() throws {
        let hold = 1_500
        let result = try ChildProcess.run("dispatch-pool-blocked-crowd", ["2000", "\(hold)"], timeout: .seconds(180))
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        let width = DispatchPool.shared.width // the child sees the same CPUs and TK_CPU_BUDGET
        let paced = hold / Int(Scheduler.crowdInterval / 1_000_000) + 2
        let others = 10 // main, the monitor, the dispatch manager, a background worker, slack
        let bound = width + Scheduler.crowdLimit(width: width) + paced + others
        let peak = try value("peak-threads", in: result.standardOutput)
        XCTAssertLessThanOrEqual(peak, bound, "a crowd of blocked items grew the pool past the crowd rule")
        XCTAssertGreaterThan(peak, width, "blocked workers were never replaced")
        XCTAssertTrue(result.standardOutput.contains("spawn ok"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("finished 2000 of 2000"), result.standardOutput)
    }

    func testUnderAPidsCgroupLimitThePoolLeavesTheReserveAndSaysSoOnce() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root, to make a pids cgroup (CI runs as root)") }
        let candidates = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        guard
            let root = candidates.first(where: {
                FileManager.default.fileExists(atPath: $0 + "/cgroup.procs") && mkdir($0 + "/tk-probe-\(getpid())", 0o755) == 0
            })
        else { throw XCTSkip("no writable pids cgroup hierarchy here") }
        let group = root + "/tk-probe-\(getpid())"
        defer { rmdir(group) }
        guard FileManager.default.fileExists(atPath: group + "/pids.max") else {
            throw XCTSkip("the pids controller is not enabled in \(root)")
        }
        // Room for the width's own workers and a few replacements, not for the crowd rule's.
        let limit = DispatchPool.shared.width + 24
        try "\(limit)".write(toFile: group + "/pids.max", atomically: false, encoding: .utf8)
        let result = try ChildProcess.run("dispatch-pool-blocked-crowd", ["500", "1000", group], timeout: .seconds(180))
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("spawn ok"), "the pool took the last pids: \(result.standardOutput)")
        let peak = try value("peak-threads", in: result.standardOutput)
        XCTAssertLessThanOrEqual(peak, limit - PidsBudget.reserve(limit: limit))
        let reports = result.standardError.components(separatedBy: "the pids cgroup allows \(limit) tasks").count - 1
        XCTAssertEqual(reports, 1, result.standardError)
        XCTAssertTrue(result.standardOutput.contains("finished 500 of 500"), result.standardOutput)
    }

    func testThePidsRuleLeavesAQuarterOfEachLimitFree() {
        XCTAssertTrue(PidsBudget.allowsOneMore([]))
        XCTAssertTrue(PidsBudget.allowsOneMore([(nil, 10_000)]), "max: no limit")
        XCTAssertTrue(PidsBudget.allowsOneMore([(200, 149)]), "150 of 200 leaves 50")
        XCTAssertFalse(PidsBudget.allowsOneMore([(200, 150)]))
        XCTAssertFalse(PidsBudget.allowsOneMore([(nil, 0), (20, 12)]), "at least 8 stay free")
        XCTAssertTrue(PidsBudget.allowsOneMore([(nil, 0), (20, 11)]))
        XCTAssertEqual(PidsBudget.headroom([]), Int.max)
        XCTAssertEqual(PidsBudget.headroom([(nil, 10_000)]), Int.max)
        XCTAssertEqual(PidsBudget.headroom([(200, 100), (1_000, 990)]), 0, "the tightest level decides")
        XCTAssertEqual(PidsBudget.headroom([(200, 100), (1_000, 700)]), 50)
        XCTAssertEqual(PidsBudget.parseLimit("max\n"), nil)
        XCTAssertEqual(PidsBudget.parseLimit("200\n"), 200)
    }

    private func value(_ key: String, in output: String) throws -> Int {
        let line = try XCTUnwrap(output.split(separator: "\n").first { $0.hasPrefix(key + " ") }, "no \(key) in \(output)")
        return try XCTUnwrap(Int(line.dropFirst(key.count + 1)))
    }
}
