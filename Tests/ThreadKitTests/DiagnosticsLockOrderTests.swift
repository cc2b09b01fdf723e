// Lock-order checking (docs/Diagnostics.md §1): seeded inversions over 2, 3 and 5 locks and
// threads are reported before any deadlock; consistent orders, recursive re-entry and try-locks
// never are; a queue `sync` orders like a lock; the process-stopping mode stops an exit test's child.
// Reports are collected by a handler into an array guarded by Foundation's NSLock (the judge).
import Foundation
import Testing
import XCTest

@testable import ThreadKit

/// Collects reports delivered to the TKDiagnostics handlers while a test runs.
final class ReportCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var lockOrder: [TKLockOrderReport] = [] // guarded by lock
    private var hangs: [TKHangReport] = [] // guarded by lock
    private let hangArrived = DispatchSemaphore(value: 0)

    func add(_ report: TKLockOrderReport) { lock.withLock { lockOrder.append(report) } }
    func add(_ report: TKHangReport) {
        lock.withLock { hangs.append(report) }
        hangArrived.signal()
    }

    var lockOrderReports: [TKLockOrderReport] { lock.withLock { lockOrder } }
    var hangReports: [TKHangReport] { lock.withLock { hangs } }

    func waitForHang(timeout: TimeInterval = 30) -> Bool { hangArrived.wait(timeout: .now() + timeout) == .success }

    /// Installs itself as the handlers with printing off; `stop` restores the defaults.
    func install() {
        TKDiagnostics.printsReports = false
        TKDiagnostics.setLockOrderHandler { [self] in add($0) }
        TKDiagnostics.setHangHandler { [self] in add($0) }
    }

    func stop() {
        TKDiagnostics.setLockOrderHandler(nil)
        TKDiagnostics.setHangHandler(nil)
        TKDiagnostics.printsReports = true
    }
}

/// Runs `body` on a new Foundation thread and waits (deadline 30 s) for it to return.
func onNewThread(_ body: @escaping @Sendable () -> Void, file: StaticString = #filePath, line: UInt = #line) {
    let done = DispatchSemaphore(value: 0)
    Thread {
        body()
        done.signal()
    }.start()
    XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "the thread did not finish (deadlocked?)", file: file, line: line)
}

/// A test case with lock-order checking on and its reports collected (`collector`); the feature
/// is left as it was found.
class LockOrderTestCase: XCTestCase {
    var collector = ReportCollector()
    private var featuresBefore: TKDiagnosticsFeature = []

    override func setUp() {
        featuresBefore = TKDiagnostics.features
        TKDiagnostics.enable(.lockOrder)
        collector = ReportCollector()
        collector.install()
    }

    override func tearDown() {
        collector.stop()
        if !featuresBefore.contains(.lockOrder) { TKDiagnostics.disable(.lockOrder) }
    }

    /// Nests `first` then `second` on the calling thread.
    static func nest(_ first: TKLock, _ second: TKLock) {
        first.lock()
        second.lock()
        second.unlock()
        first.unlock()
    }
}

final class DiagnosticsLockOrderTests: LockOrderTestCase {

    private func named(_ count: Int, _ prefix: String) -> [TKLock] {
        (0..<count).map { i in
            let lock = TKLock()
            lock.name = "\(prefix)\(i)"
            return lock
        }
    }

    /// Thread i takes lock i then lock i+1 (mod n), one thread after another: no thread ever waits,
    /// yet the last closes the cycle, which must be reported naming every lock.
    private func assertRingInversionReported(_ n: Int, file: StaticString = #filePath, line: UInt = #line) {
        let prefix = "ring\(n)-"
        let locks = named(n, prefix)
        for i in 0..<n {
            let first = locks[i]
            let second = locks[(i + 1) % n]
            onNewThread(
                {
                    first.lock()
                    second.lock()
                    second.unlock()
                    first.unlock()
                }, file: file, line: line)
            if i < n - 1 { XCTAssertEqual(collector.lockOrderReports.count, 0, "reported before the cycle closed", file: file, line: line) }
        }
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1, "one report for the one cycle", file: file, line: line)
        guard let report = reports.first else { return }
        XCTAssertEqual(report.locks.count, n, file: file, line: line)
        XCTAssertEqual(report.edges.count, n, file: file, line: line)
        for i in 0..<n {
            XCTAssertTrue(report.locks.contains("TKLock \"\(prefix)\(i)\""), "\(report.locks) lacks lock \(i)", file: file, line: line)
        }
        for edge in report.edges {
            XCTAssertFalse(edge.callStack.isEmpty, "an edge without a call stack", file: file, line: line)
            XCTAssertTrue(edge.thread.hasPrefix("thread "), edge.thread, file: file, line: line)
        }
        XCTAssertTrue(report.description.contains("potential deadlock"), report.description, file: file, line: line)
    }

    func testTwoLockInversionIsReportedWithoutAnyDeadlock() { assertRingInversionReported(2) }
    func testThreeLockInversionIsReported() { assertRingInversionReported(3) }
    func testFiveLockInversionIsReported() { assertRingInversionReported(5) }

    /// The real thing: two threads each hold one lock and ask for the other. The cycle is reported
    /// at the second request, before either waits; thread 1 then gives up (its request is timed),
    /// so the test ends instead of deadlocking.
    func testInversionIsReportedBeforeTheThreadsDeadlock() {
        let locks = named(2, "live-")
        let a = locks[0]
        let b = locks[1]
        let bothHold = DispatchGroup()
        bothHold.enter()
        bothHold.enter()
        let collector = self.collector
        let thread1 = Workers.start {
            a.lock()
            bothHold.leave()
            _ = bothHold.wait(timeout: .now() + 30)
            // Ask for b until the cycle has been reported, then give up and release a.
            while collector.lockOrderReports.isEmpty {
                if b.lock(before: .now + .milliseconds(20)) {
                    b.unlock()
                    break
                }
            }
            a.unlock()
        }
        let thread2 = Workers.start {
            b.lock()
            bothHold.leave()
            _ = bothHold.wait(timeout: .now() + 30)
            a.lock() // waits until thread 1 gives up
            a.unlock()
            b.unlock()
        }
        XCTAssertEqual(thread1.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(thread2.wait(timeout: .now() + 30), .success)
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1)
        XCTAssertEqual(Set(reports.first?.locks ?? []), ["TKLock \"live-0\"", "TKLock \"live-1\""])
    }

    func testACycleIsReportedOnce() {
        let locks = named(2, "once-")
        for _ in 0..<3 {
            onNewThread {
                locks[0].lock()
                locks[1].lock()
                locks[1].unlock()
                locks[0].unlock()
            }
            onNewThread {
                locks[1].lock()
                locks[0].lock()
                locks[0].unlock()
                locks[1].unlock()
            }
        }
        XCTAssertEqual(collector.lockOrderReports.count, 1)
    }

    /// 10^5 acquisitions (scaled by TK_STRESS) of random subsets of 8 locks of every kind, always
    /// in ascending order, on 4 threads: no cycle exists, so nothing may be reported.
    func testConsistentOrderOverManyRandomAcquisitionsIsNeverReported() {
        let locks: [any TKLocking] = [
            TKLock(), TKRecursiveLock(), TKCondition(), TKConditionLock(), TKLock(), TKSpinLock(),
            TKRecursiveLock(), TKLock(),
        ]
        let rw = TKReadWriteLock()
        let acquisitions = stress(100_000)
        let threads = 4
        Workers.run(threads) { _ in
            var generator = SystemRandomNumberGenerator()
            var done = 0
            while done < acquisitions / threads {
                let mask = Int.random(in: 1..<256, using: &generator)
                let useRW = Bool.random(using: &generator)
                if useRW { if Bool.random(using: &generator) { rw.readLock() } else { rw.writeLock() } }
                var taken: [Int] = []
                for i in 0..<8 where mask & (1 << i) != 0 {
                    locks[i].lock()
                    taken.append(i)
                }
                for i in taken.reversed() { locks[i].unlock() }
                if useRW { rw.unlock() }
                done += taken.count + (useRW ? 1 : 0)
            }
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0, collector.lockOrderReports.map(\.description).joined(separator: "\n"))
    }

    func testRecursiveReentryIsNeverReported() {
        let recursive = TKRecursiveLock()
        let plain = TKLock()
        recursive.name = "recursive"
        plain.name = "plain"
        onNewThread {
            recursive.lock()
            plain.lock()
            recursive.lock() // re-entry while holding plain: not an order plain → recursive
            XCTAssertTrue(recursive.tryLock())
            recursive.unlock()
            recursive.unlock()
            plain.unlock()
            recursive.unlock()
        }
        onNewThread {
            synchronized(recursive) { synchronized(plain) { synchronized(recursive) {} } }
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0, collector.lockOrderReports.map(\.description).joined(separator: "\n"))
    }

    func testTryLockNeverCreatesAnOrder() {
        let a = TKLock()
        let b = TKLock()
        let rw = TKReadWriteLock()
        let spin = TKSpinLock()
        onNewThread {
            a.lock()
            b.lock()
            rw.writeLock()
            spin.lock()
            spin.unlock()
            rw.unlock()
            b.unlock()
            a.unlock()
        }
        onNewThread {
            spin.lock()
            XCTAssertTrue(rw.tryReadLock())
            XCTAssertTrue(b.tryLock())
            XCTAssertTrue(a.tryLock())
            a.unlock()
            b.unlock()
            rw.unlock()
            spin.unlock()
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0, collector.lockOrderReports.map(\.description).joined(separator: "\n"))
    }

    /// synchronized(token) locks are checked per token; nesting in one order is never reported,
    /// however the table's slots are reused between calls.
    func testSynchronizedTokensInOneOrderAreNotReported() {
        let tokens = (0..<6).map { _ in TKLock() } // any Sendable objects serve as tokens
        for round in 0..<20 {
            onNewThread {
                let i = round % 5
                synchronized(tokens[i]) { synchronized(tokens[i + 1]) { synchronized(tokens[i]) {} } }
            }
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0, collector.lockOrderReports.map(\.description).joined(separator: "\n"))
    }

    /// A token's lock is found by the token's address, and a binding outlives its token: a new
    /// object allocated at a dead token's address finds the dead token's slot. To the checker it
    /// is a new lock, with none of the dead token's orders (a CI run reported a false 5-lock cycle
    /// through synchronized tokens whose addresses earlier tests' tokens had used). The reused
    /// address is simulated: two objects take the table's slow path under one identity.
    func testANewTokenAtADeadTokensAddressInheritsNoOrder() {
        let table = SyncTable.shared
        let address: UInt = 0x7ff0_dead_0040
        let other = TKLock()
        do {
            let first = TKLock()
            onNewThread {
                let entry = table.slowLock(address, token: first)
                other.lock()
                other.unlock()
                table.unlock(entry)
            }
        }
        let second = TKLock()
        onNewThread {
            other.lock()
            let entry = table.slowLock(address, token: second)
            table.unlock(entry)
            other.unlock()
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0, collector.lockOrderReports.map(\.description).joined(separator: "\n"))
        // The same token again keeps its identity: its own orders still count.
        onNewThread {
            let entry = table.slowLock(address, token: second)
            other.lock()
            other.unlock()
            table.unlock(entry)
        }
        XCTAssertEqual(collector.lockOrderReports.count, 1, "second's two orders were not both seen as its own")
    }

    /// A thread holding a lock `sync`s onto a serial queue; an item of that queue takes the lock:
    /// the queue is a lock in the order graph, so the cycle lock → queue → lock is reported.
    func testQueueSyncOrdersLikeALock() {
        let queue = TKDispatchQueue(label: "diagnostics.sync-order")
        let lock = TKLock()
        lock.name = "model"
        onNewThread {
            lock.lock()
            queue.sync {}
            lock.unlock()
        }
        let ran = DispatchSemaphore(value: 0)
        queue.async {
            lock.lock()
            lock.unlock()
            ran.signal()
        }
        XCTAssertEqual(ran.wait(timeout: .now() + 30), .success)
        let reports = collector.lockOrderReports
        XCTAssertEqual(reports.count, 1)
        XCTAssertEqual(Set(reports.first?.locks ?? []), ["TKLock \"model\"", "TKDispatchQueue \"diagnostics.sync-order\""])
    }

    func testDisabledCheckingRecordsNothing() {
        TKDiagnostics.disable(.lockOrder)
        defer { TKDiagnostics.enable(.lockOrder) }
        let locks = named(2, "off-")
        onNewThread {
            locks[0].lock()
            locks[1].lock()
            locks[1].unlock()
            locks[0].unlock()
        }
        onNewThread {
            locks[1].lock()
            locks[0].lock()
            locks[0].unlock()
            locks[1].unlock()
        }
        XCTAssertEqual(collector.lockOrderReports.count, 0)
    }
}

/// lockorder:fatal, an exit test (Support/MisuseAssertions.swift).
@Suite struct DiagnosticsLockOrderExitTests {
    @Test func lockOrderFatalModeStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDiagnostics.enable([.lockOrder, .lockOrderFatal])
            let first = TKLock()
            let second = TKLock()
            first.name = "first"
            second.name = "second"
            Workers.start {
                first.lock()
                second.lock()
                second.unlock()
                first.unlock()
            }.wait()
            Workers.start {
                second.lock()
                first.lock()
                first.unlock()
                second.unlock()
            }.wait()
        }
        expectMisuse(result, mentions: ["potential deadlock", "TKLock \"first\"", "TKLock \"second\"", "lockorder:fatal"])
    }
}
