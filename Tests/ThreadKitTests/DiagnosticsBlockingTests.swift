// Blocking in the wrong place (docs/Diagnostics.md §5): a Swift task that takes a contended
// TKLock, waits on a TKDispatchSemaphore or calls `sync` on a busy queue is reported once per call
// site, with the call site's function in the stack; so is an actor pinned to a run loop that
// waits, and a task on ThreadKit's pool blocked outside ThreadKit (the pool's monitor). The same
// waits on plain threads are not reported. The main loop blocked in a timer callback is shown in
// a child process, `blocking:fatal` in an exit test. Judges outside ThreadKit: the kernel's view of
// the waiting thread (asleep in a futex wait, /proc), Foundation semaphores for the hand-offs,
// symbol names in the stack.
import Foundation
import Synchronization
import Testing
import XCTest

@testable import ThreadKit

/// Collects blocking reports (NSLock, a Foundation semaphore per arrival).
final class BlockingCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [TKBlockingReport] = [] // guarded by lock
    private let arrived = DispatchSemaphore(value: 0)

    func install() {
        TKDiagnostics.printsReports = false
        TKDiagnostics.setBlockingHandler { [self] report in
            lock.withLock { reports.append(report) }
            arrived.signal()
        }
    }

    func stop() {
        TKDiagnostics.setBlockingHandler(nil)
        TKDiagnostics.printsReports = true
    }

    /// The reports whose stack has a frame naming `function`.
    func reports(at function: String) -> [TKBlockingReport] {
        lock.withLock { reports }.filter { $0.callStack.contains { $0.contains(function) } }
    }

    /// Waits (at most 30 s) until a report whose stack names `function` has arrived.
    func waitForReport(at function: String) -> TKBlockingReport? {
        let deadline = Date() + 30
        while true {
            if let report = reports(at: function).first { return report }
            if arrived.wait(timeout: .now() + max(0, deadline.timeIntervalSinceNow)) == .timedOut {
                return reports(at: function).first
            }
        }
    }
}

/// A hand-off between a waiter and the thread that makes it wait, round by round: the waiter
/// announces (with its kernel thread id) that it is about to wait; the other side waits until the
/// kernel has that thread asleep in a futex wait, so the wait really parked.
final class ParkGate: @unchecked Sendable {
    let held = DispatchSemaphore(value: 0)
    let roundDone = DispatchSemaphore(value: 0)
    private let announced = Atomic<Int>(0)
    private let tid = Atomic<Int32>(0)

    /// Called by the waiter just before its ThreadKit wait of `round`.
    func aboutToWait(_ round: Int) {
        tid.store(KernelThread.currentID(), ordering: .relaxed)
        announced.store(round, ordering: .releasing)
    }

    /// Waits (at most 30 s) until the waiter of `round` sleeps in the kernel.
    func waitUntilParked(_ round: Int) -> Bool {
        waitUntil(.now + .seconds(30)) {
            announced.load(ordering: .acquiring) == round && KernelThread.isParkedInFutex(tid.load(ordering: .relaxed))
        }
    }
}

/// The call site of the lock tests: the same `lock()` twice, each time contended.
@inline(never)
func takeContendedLockTwice(_ lock: TKLock, _ gate: ParkGate) {
    for round in 1...2 {
        gate.held.wait()
        gate.aboutToWait(round)
        lock.lock()
        lock.unlock()
        gate.roundDone.signal()
    }
}

@inline(never)
func waitOnSemaphoreForBlockingTest(_ semaphore: TKDispatchSemaphore, _ gate: ParkGate) {
    gate.aboutToWait(1)
    semaphore.wait()
}

@inline(never)
func syncOntoBusyQueueForBlockingTest(_ queue: TKDispatchQueue, _ gate: ParkGate) {
    gate.aboutToWait(1)
    queue.sync {}
}

@inline(never)
func readOutsideThreadKitForBlockingTest(_ fd: Int32) {
    var byte: UInt8 = 0
    _ = read(fd, &byte, 1)
}

/// An actor whose executor is a run loop on a thread of its own.
actor LoopPinnedActor {
    let host: ExecutorLoop
    init(host: ExecutorLoop) { self.host = host }
    nonisolated var unownedExecutor: UnownedSerialExecutor { host.loop.asUnownedSerialExecutor() }

    func takeContendedLock(_ lock: TKLock, _ gate: ParkGate) { lockInsideLoopPinnedActor(lock, gate) }
}

@inline(never)
func lockInsideLoopPinnedActor(_ lock: TKLock, _ gate: ParkGate) {
    gate.aboutToWait(1)
    lock.lock()
    lock.unlock()
}

final class DiagnosticsBlockingTests: XCTestCase {
    private var collector = BlockingCollector()

    override func setUp() {
        collector = BlockingCollector()
        collector.install()
        TKDiagnostics.resetReports()
        TKDiagnostics.enable(.blocking)
    }

    override func tearDown() {
        TKDiagnostics.disable(.blocking)
        collector.stop()
    }

    /// Holds `lock` on a plain thread for `rounds` rounds: lock, let the waiter go, wait until it
    /// sleeps in the kernel, unlock, wait for its round to end.
    private func holdWhileTheWaiterParks(_ lock: TKLock, _ gate: ParkGate, rounds: Int) -> Thread {
        let thread = Thread {
            for round in 1...rounds {
                lock.lock()
                gate.held.signal()
                _ = gate.waitUntilParked(round)
                lock.unlock()
                gate.roundDone.wait()
            }
        }
        thread.start()
        return thread
    }

    func testATaskTakingAContendedLockIsReportedOnceAtItsCallSite() async {
        let lock = TKLock()
        let gate = ParkGate()
        _ = holdWhileTheWaiterParks(lock, gate, rounds: 2)
        await Task.detached { takeContendedLockTwice(lock, gate) }.value
        let reports = collector.reports(at: "takeContendedLockTwice")
        XCTAssertEqual(reports.count, 1, "two parked waits from one call site: \(reports)")
        guard let report = reports.first else { return }
        XCTAssertEqual(report.place, .swiftConcurrencyJob)
        XCTAssertTrue(report.starves.contains("Swift concurrency job"), report.starves)
        XCTAssertTrue(report.callSite.contains("takeContendedLockTwice"), "call site: \(report.callSite)")
        XCTAssertTrue(report.description.contains("ThreadKit blocking"), report.description)
        XCTAssertTrue(report.description.contains("Fix:"), report.description)
        XCTAssertEqual(TKDiagnostics.blockingReports.filter { $0.callSite.contains("takeContendedLockTwice") }.count, 1)
    }

    func testATaskWaitingOnASemaphoreIsReported() async {
        let semaphore = TKDispatchSemaphore(value: 0)
        let gate = ParkGate()
        let waiter = Task.detached { waitOnSemaphoreForBlockingTest(semaphore, gate) }
        let report = collector.waitForReport(at: "waitOnSemaphoreForBlockingTest")
        XCTAssertTrue(gate.waitUntilParked(1), "the task never slept in the semaphore")
        semaphore.signal()
        await waiter.value
        XCTAssertEqual(report?.place, .swiftConcurrencyJob)
        XCTAssertTrue(report?.callSite.contains("waitOnSemaphoreForBlockingTest") ?? false, "\(String(describing: report))")
    }

    func testATaskCallingSyncOnABusyQueueIsReported() async {
        let queue = TKDispatchQueue(label: "blocking.busy")
        let release = DispatchSemaphore(value: 0)
        let busy = DispatchSemaphore(value: 0)
        queue.async {
            busy.signal()
            release.wait()
        }
        busy.wait()
        let gate = ParkGate()
        let waiter = Task.detached { syncOntoBusyQueueForBlockingTest(queue, gate) }
        let report = collector.waitForReport(at: "syncOntoBusyQueueForBlockingTest")
        XCTAssertTrue(gate.waitUntilParked(1), "the task never slept in sync")
        release.signal()
        await waiter.value
        XCTAssertEqual(report?.place, .swiftConcurrencyJob)
        XCTAssertTrue(report?.callSite.contains("syncOntoBusyQueueForBlockingTest") ?? false, "\(String(describing: report))")
    }

    func testAnActorPinnedToARunLoopThatWaitsIsReported() async {
        let host = ExecutorLoop()
        defer { host.worker.finish() }
        let actor = LoopPinnedActor(host: host)
        let lock = TKLock()
        let gate = ParkGate()
        let holder = Thread {
            lock.lock()
            gate.held.signal()
            _ = gate.waitUntilParked(1)
            lock.unlock()
        }
        holder.start()
        XCTAssertEqual(gate.held.wait(timeout: .now() + 30), .success)
        await actor.takeContendedLock(lock, gate)
        let reports = collector.reports(at: "lockInsideLoopPinnedActor")
        XCTAssertEqual(reports.count, 1, "\(reports)")
        XCTAssertEqual(reports.first?.place, .actorRunLoop)
        XCTAssertTrue(reports.first?.starves.contains("actor executor TKRunLoop") ?? false, "\(String(describing: reports.first))")
    }

    func testATaskOnThreadKitsPoolBlockedOutsideThreadKitIsNoticedByThePoolsMonitor() async throws {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        // More tasks than the pool runs at once: work waits, so the monitor watches the blocked
        // workers, counts them stalled and samples their stacks.
        let tasks = 2 * CPUBudget.poolWidth() + 2
        let readEnd = fds[0]
        let waiters = (0..<tasks).map { _ in
            Task(executorPreference: TKConcurrency.taskExecutor) { readOutsideThreadKitForBlockingTest(readEnd) }
        }
        let report = collector.waitForReport(at: "readOutsideThreadKitForBlockingTest")
        let bytes = [UInt8](repeating: 1, count: tasks)
        XCTAssertEqual(write(fds[1], bytes, bytes.count), bytes.count)
        for waiter in waiters { await waiter.value }
        XCTAssertNotNil(report, "the monitor's stalled workers were not reported")
        XCTAssertEqual(report?.place, .swiftConcurrencyJob)
        XCTAssertTrue(report?.noticedBy.contains("monitor") ?? false, "\(String(describing: report))")
        XCTAssertTrue(report?.callSite.contains("readOutsideThreadKitForBlockingTest") ?? false, "\(String(describing: report))")
        XCTAssertEqual(collector.reports(at: "readOutsideThreadKitForBlockingTest").count, 1, "one call site, one report")
    }

    func testTheSameWaitsOnPlainThreadsAreNotReported() {
        // A contended lock, twice.
        let lock = TKLock()
        let lockGate = ParkGate()
        _ = holdWhileTheWaiterParks(lock, lockGate, rounds: 2)
        onNewThread { takeContendedLockTwice(lock, lockGate) }
        // A semaphore.
        let semaphore = TKDispatchSemaphore(value: 0)
        let semaphoreGate = ParkGate()
        let semaphoreDone = DispatchSemaphore(value: 0)
        Thread {
            waitOnSemaphoreForBlockingTest(semaphore, semaphoreGate)
            semaphoreDone.signal()
        }.start()
        XCTAssertTrue(semaphoreGate.waitUntilParked(1))
        semaphore.signal()
        XCTAssertEqual(semaphoreDone.wait(timeout: .now() + 30), .success)
        // `sync` onto a busy queue.
        let queue = TKDispatchQueue(label: "blocking.plain")
        let release = DispatchSemaphore(value: 0)
        queue.async { release.wait() }
        let syncGate = ParkGate()
        let syncDone = DispatchSemaphore(value: 0)
        Thread {
            syncOntoBusyQueueForBlockingTest(queue, syncGate)
            syncDone.signal()
        }.start()
        XCTAssertTrue(syncGate.waitUntilParked(1))
        release.signal()
        XCTAssertEqual(syncDone.wait(timeout: .now() + 30), .success)
        // Reports are made before the wait parks, so any would be here by now.
        for function in ["takeContendedLockTwice", "waitOnSemaphoreForBlockingTest", "syncOntoBusyQueueForBlockingTest"] {
            XCTAssertEqual(collector.reports(at: function).count, 0, "a wait on a plain thread was reported: \(function)")
        }
    }

    func testTheMainLoopBlockedInATimerCallbackIsReported() throws {
        let result = try ChildProcess.run("blocking-main-loop")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("blocking reports: 1"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("place mainRunLoop"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.contains("blockTheMainLoopOnALock"), "the call site: \(result.standardOutput)")
        XCTAssertTrue(result.standardError.contains("the main thread's run loop"), result.standardError)
    }
}

/// blocking:fatal, an exit test (Support/MisuseAssertions.swift).
@Suite struct DiagnosticsBlockingExitTests {
    @Test func blockingFatalStopsTheProcessNamingTheCallSite() async {
        // The exit test's body runs in a Swift task: a wait there is in the wrong place.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDiagnostics.enable([.blocking, .blockingFatal])
            waitInATaskUnderBlockingFatal(TKDispatchSemaphore(value: 0))
        }
        expectMisuse(result, mentions: ["ThreadKit blocking", "waitInATaskUnderBlockingFatal", "blocking:fatal", "Fix:"])
    }
}

/// The call site the fatal message must name.
@inline(never)
func waitInATaskUnderBlockingFatal(_ semaphore: TKDispatchSemaphore) {
    semaphore.wait()
}
