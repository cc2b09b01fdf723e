// Contention counters and configuration (docs/Diagnostics.md §3): contended acquisitions of a
// named lock, `sync` waits and enqueue-to-start latency of a queue are counted; uncontended locking
// is not; TK_DIAGNOSTICS arguments are parsed (threshold, unknown names warned about). The
// contention is staged with Foundation threads and judged from /proc (the waiter is parked).
import Foundation
import ThreadKit
import XCTest

final class DiagnosticsContentionTests: XCTestCase {
    private var featuresBefore: TKDiagnosticsFeature = []

    override func setUp() {
        featuresBefore = TKDiagnostics.features
        TKDiagnostics.enable(.contention)
        TKDiagnostics.resetContentionCounters()
    }

    override func tearDown() {
        if !featuresBefore.contains(.contention) { TKDiagnostics.disable(.contention) }
    }

    private func row(_ name: String) -> TKContentionCounters? {
        TKDiagnostics.contentionCounters.first { $0.name == name }
    }

    func testAContendedLockIsCounted() {
        let lock = TKLock()
        lock.name = "contended"
        lock.lock()
        let waiter = Atomic32()
        let done = Workers.start {
            waiter.store(KernelThread.currentID())
            lock.lock()
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { waiter.load() > 0 && KernelThread.isParkedInFutex(waiter.load()) })
        lock.unlock()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        guard let counters = row("TKLock \"contended\"") else { return XCTFail("no row: \(TKDiagnostics.contentionCounters)") }
        XCTAssertEqual(counters.waits, 1)
        XCTAssertGreaterThan(counters.totalWait, .zero)
        XCTAssertEqual(counters.maxWait, counters.totalWait)
        XCTAssertTrue(TKDiagnostics.summary.contains("TKLock \"contended\": waits 1"), TKDiagnostics.summary)
    }

    func testUncontendedLockingIsNotCounted() {
        let lock = TKLock()
        let recursive = TKRecursiveLock()
        lock.name = "quiet"
        recursive.name = "quiet recursive"
        for _ in 0..<1_000 {
            lock.lock()
            lock.unlock()
            recursive.lock()
            recursive.lock()
            recursive.unlock()
            recursive.unlock()
        }
        XCTAssertNil(row("TKLock \"quiet\""))
        XCTAssertNil(row("TKRecursiveLock \"quiet recursive\""))
    }

    func testQueueLatencyAndSyncWaitsAreCounted() {
        let queue = TKDispatchQueue(label: "diagnostics.latency")
        let items = 50
        let group = DispatchGroup()
        for _ in 0..<items {
            group.enter()
            queue.async { group.leave() }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        // A sync that must wait: the queue is busy with an item until the syncing thread is parked.
        let release = DispatchSemaphore(value: 0)
        let busy = DispatchSemaphore(value: 0)
        queue.async {
            busy.signal()
            _ = release.wait(timeout: .now() + 30)
        }
        XCTAssertEqual(busy.wait(timeout: .now() + 30), .success)
        let syncer = Atomic32()
        let done = Workers.start {
            syncer.store(KernelThread.currentID())
            queue.sync {}
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { syncer.load() > 0 && KernelThread.isParkedInFutex(syncer.load()) })
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        guard let counters = row("queue \"diagnostics.latency\"") else { return XCTFail("no row: \(TKDiagnostics.contentionCounters)") }
        XCTAssertGreaterThanOrEqual(counters.starts, items + 1)
        XCTAssertGreaterThan(counters.maxLatency, .zero)
        XCTAssertEqual(counters.waits, 1)
    }

    /// Runs `ThreadKitTestChild diagnostics-config` with TK_DIAGNOSTICS set; returns its output.
    private func configuration(_ value: String) throws -> (status: Int32, stdout: String, stderr: String) {
        let result = try ChildProcess.run("diagnostics-config", environment: ["TK_DIAGNOSTICS": value])
        return (result.status, result.standardOutput, result.standardError)
    }

    /// TK_DIAGNOSTICS as a child process starts with it: features, threshold, unknown names.
    func testEnvironmentIsParsedAndUnknownNamesWarned() throws {
        let (status, stdout, stderr) = try configuration("hangs:75ms,contention,frobnicate")
        XCTAssertEqual(status, 0, stderr)
        XCTAssertTrue(stdout.contains("threshold-ns 75000000"), stdout)
        XCTAssertTrue(stdout.contains("hangs") && stdout.contains("contention"), stdout)
        XCTAssertTrue(stderr.contains("\"frobnicate\""), stderr)
    }

    func testOffTurnsEverythingOff() throws {
        let (_, stdout, _) = try configuration("off")
        XCTAssertTrue(stdout.contains("ThreadKit diagnostics: off"), stdout)
    }
}
