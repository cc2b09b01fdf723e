// The dispatch pool's width follows the CPUs the process may use (issue 12): the affinity mask a
// `taskset` or container sets, and the cgroup CPU quota. Judged by a child process whose mask is
// restricted before its pool starts (the global queue's description states the width; the child
// drops TK_CPU_BUDGET, which overrides the width in test runs that set it), by the
// kernel's own answer for the mask (sched_getaffinity on this thread), and by the quota parser on
// the cgroup file formats.
import CThreadKit
import Dispatch
import Foundation
import XCTest

@testable import ThreadKit

final class DispatchPoolWidthTests: XCTestCase {
    /// Under `../shared/tools/fakecpus/run` (CI runs the whole suite so, as on a 16-CPU machine)
    /// `sched_getaffinity` answers the faked count whatever mask a thread has, so the two tests
    /// that judge the pool by a mask they set cannot run there: they skip, saying why.
    private func skipUnderTheCPUShim() throws {
        let preload = ProcessInfo.processInfo.environment["LD_PRELOAD"] ?? ""
        if preload.contains("fakecpus") {
            throw XCTSkip("LD_PRELOAD has the fakecpus shim, which fakes the affinity mask this test sets")
        }
    }

    func testThePoolsWidthFollowsTheAffinityMask() throws {
        try skipUnderTheCPUShim()
        let result = try ChildProcess.run("dispatch-pool-width-affinity", ["1"])
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(result.standardOutput.contains("kept 1"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("width: 1 (the pool's workers)"), result.standardOutput)
        // Two CPUs only where this process may use two: the child keeps the first two of our
        // affinity mask, and our cgroup quota applies to it as well (online CPUs would say
        // nothing about either). TK_CPU_BUDGET, if this run sets it, the child ignores.
        if CPUBudget.usableCPUs() >= 2 {
            let two = try ChildProcess.run("dispatch-pool-width-affinity", ["2"])
            XCTAssertEqual(two.status, 0, two.standardError)
            XCTAssertTrue(two.standardOutput.contains("kept 2"), two.standardOutput)
            XCTAssertTrue(two.standardOutput.contains("width: 2 (the pool's workers)"), two.standardOutput)
        }
    }

    /// A normal worker asked for by a background worker (background work submitting to a default
    /// queue while no normal worker exists) runs at the normal class: SCHED_OTHER and the nice value
    /// of the process's other threads, not the background worker's SCHED_BATCH and nice 10, which
    /// a thread inherits from its creator. Judged by the kernel's own answer inside the item.
    func testANormalWorkerAskedForByABackgroundWorkerRunsAtTheNormalClass() throws {
        let result = try ChildProcess.run("dispatch-pool-normal-from-background")
        XCTAssertEqual(result.status, 0, result.standardError)
        let lines = result.standardOutput.split(separator: "\n")
        guard let mainLine = lines.first(where: { $0.hasPrefix("main nice ") }),
            let itemLine = lines.first(where: { $0.hasPrefix("default item policy ") })
        else {
            return XCTFail("unexpected output: \(result.standardOutput)")
        }
        let mainNice = mainLine.split(separator: " ").last.map(String.init) ?? "?"
        let fields = itemLine.split(separator: " ")
        XCTAssertEqual(fields[3], "0", "not SCHED_OTHER (3 is SCHED_BATCH): \(itemLine)")
        XCTAssertEqual(String(fields[5]), mainNice, "not the normal nice value: \(itemLine), \(mainLine)")
    }

    func testTheBudgetCountsTheCallingThreadsAffinityMask() throws {
        try skipUnderTheCPUShim()
        // The mask is per thread: restrict a thread of our own (Foundation's, the judge) and ask there.
        let counts = SharedCounts()
        let thread = Thread {
            counts.before = CPUBudget.affinityCount() ?? -1
            counts.kept = Int(tk_affinity_keep_first(1))
            counts.after = CPUBudget.affinityCount() ?? -1
            counts.budget = CPUBudget.usableCPUs()
            counts.done.signal()
        }
        thread.start()
        XCTAssertEqual(counts.done.wait(timeout: .now() + 30), .success)
        XCTAssertGreaterThanOrEqual(counts.before, 1)
        XCTAssertLessThanOrEqual(counts.before, CPUBudget.onlineCPUs())
        XCTAssertEqual(counts.kept, 1)
        XCTAssertEqual(counts.after, 1)
        XCTAssertEqual(counts.budget, 1)
    }

    func testTheCgroupQuotaIsReadInWholeCPUsRoundedUp() {
        XCTAssertEqual(CPUBudget.parseCPUMax("200000 100000\n"), 2)
        XCTAssertEqual(CPUBudget.parseCPUMax("150000 100000\n"), 2)
        XCTAssertEqual(CPUBudget.parseCPUMax("50000 100000\n"), 1)
        XCTAssertNil(CPUBudget.parseCPUMax("max 100000\n"))
        XCTAssertEqual(CPUBudget.parseCFS(quota: "400000\n", period: "100000\n"), 4)
        XCTAssertNil(CPUBudget.parseCFS(quota: "-1\n", period: "100000\n"))
        XCTAssertEqual(CPUBudget.ancestry("/a/b"), ["/a/b", "/a", ""])
        XCTAssertEqual(CPUBudget.ancestry("/"), [""])
        // This machine's own quota, if any, never raises the budget above the online CPUs.
        XCTAssertLessThanOrEqual(CPUBudget.usableCPUs(), CPUBudget.onlineCPUs())
    }
}

/// Written by the test's thread before it signals `done`, read after.
private final class SharedCounts: @unchecked Sendable {
    var before = 0, kept = 0, after = 0, budget = 0
    let done = DispatchSemaphore(value: 0)
}
