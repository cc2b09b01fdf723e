// Who waits for whom (docs/Diagnostics.md §6): thread dumps name each wait's holder, and a cycle
// of waits as a deadlock with every edge. The deadlocks run in child processes (they never end:
// the child takes its dump as soon as its own wait graph holds the cycle, and leaves with _exit),
// as do the dump signal and the hang report; each is judged from the child's output, whose thread
// ids are checked against each other (each edge's holder is the next edge's thread).
import Foundation
import ThreadKit
import XCTest

final class DiagnosticsWaitGraphTests: XCTestCase {
    // MARK: Five two-thread deadlocks, two kinds of wait each

    func testLockAndQueueSyncDeadlockIsNamed() throws {
        try assertDeadlock(
            "lock-sync",
            [
                ("left", "TKDispatchQueue.sync", "TKDispatchQueue \"store\"", "run by"),
                ("right", "TKLock.lock()", "TKLock \"ledger\"", "held by"),
            ])
    }

    func testSyncAndJoinDeadlockIsNamed() throws {
        try assertDeadlock(
            "sync-join",
            [
                ("left", "TKThread.join()", "TKThread \"right\"", "running as"),
                ("right", "TKDispatchQueue.sync", "TKDispatchQueue \"store\"", "run by"),
            ])
    }

    func testOperationAndLockDeadlockIsNamed() throws {
        // The operation runs on a pool worker, whose name the pool chooses.
        try assertDeadlock(
            "operation-lock",
            [
                ("left", "TKOperation.waitUntilFinished()", "TKBlockOperation \"post entry\"", "run by"),
                (nil, "TKLock.lock()", "TKLock \"ledger\"", "held by"),
            ])
    }

    func testPerformWaitUntilDoneAndLockDeadlockIsNamed() throws {
        try assertDeadlock(
            "perform-lock",
            [
                ("left", "TKThread.perform(waitUntilDone:)", "the run loop of TKThread \"right\"", "run by"),
                ("right", "TKLock.lock()", "TKLock \"ledger\"", "held by"),
            ])
    }

    func testTwoQueuesSyncDeadlockIsNamed() throws {
        try assertDeadlock(
            "sync-sync",
            [
                ("left", "TKDispatchQueue.sync", "TKDispatchQueue \"audit\"", "run by"),
                ("right", "TKDispatchQueue.sync", "TKDispatchQueue \"accounts\"", "run by"),
            ])
    }

    // MARK: Holders without a deadlock

    func testWaiterNamesTheLockHolderAndNoDeadlock() throws {
        let result = try ChildProcess.run("wait-holder")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        let holder = try XCTUnwrap(threadID(named: "holder", in: result.standardOutput), result.standardOutput)
        XCTAssertTrue(
            result.standardOutput.contains(
                "\"waiter\" (QoS utility): waiting in TKLock.lock() for TKLock \"ledger\", held by thread \(holder) \"holder\""),
            result.standardOutput)
        XCTAssertFalse(result.standardOutput.contains("ThreadKit deadlock"), result.standardOutput)
        XCTAssertTrue(result.standardOutput.hasSuffix("end of ThreadKit thread dump\n"), result.standardOutput)
    }

    func testSignalPrintsTheDumpOnStandardError() throws {
        let process = Process()
        process.executableURL = ChildProcess.executable
        process.arguments = ["dump-signal-wait"]
        var environment = ProcessInfo.processInfo.environment
        environment["TK_DIAGNOSTICS"] = "dump:SIGUSR2"
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        let input = Pipe()
        let output = StreamedPipe()
        let errors = StreamedPipe()
        process.standardInput = input
        process.standardOutput = output.pipe
        process.standardError = errors.pipe
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        XCTAssertTrue(output.wait(until: .now + .seconds(60)) { $0.contains("ready\n") }, "the child never got ready: \(errors.text)")
        XCTAssertEqual(kill(process.processIdentifier, SIGUSR2), 0)
        XCTAssertTrue(
            errors.wait(until: .now + .seconds(60)) { $0.contains("end of ThreadKit thread dump") },
            "no dump after SIGUSR2: \(errors.text)")
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .exit, "the signal must not kill a process that asked for dumps")
        XCTAssertEqual(process.terminationStatus, 0)
        let dump = errors.text
        let holder = try XCTUnwrap(threadID(named: "holder", in: dump), dump)
        XCTAssertTrue(dump.contains("waiting in TKLock.lock() for TKLock \"ledger\", held by thread \(holder) \"holder\""), dump)
    }

    func testHangReportCarriesTheThreadDump() throws {
        let result = try ChildProcess.run("hang-holder")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        let report = result.standardOutput
        XCTAssertTrue(report.hasPrefix("ThreadKit hang: "), report)
        let holder = try XCTUnwrap(threadID(named: "holder", in: report), report)
        XCTAssertTrue(report.contains("waiting in TKLock.lock() for TKLock \"ledger\", held by thread \(holder) \"holder\""), report)
        XCTAssertTrue(report.contains("running TKDispatchQueue \"store\" (exclusively)"), report)
    }

    func testSemaphoreWaitNamesItsLastSignallerAsAHintNotAHolder() throws {
        let wasOn = TKDiagnostics.features.contains(.waits)
        TKDiagnostics.enable(.waits)
        defer { if !wasOn { TKDiagnostics.disable(.waits) } }
        let semaphore = TKDispatchSemaphore(value: 0)
        let signalled = TKDispatchSemaphore(value: 0)
        let release = TKDispatchSemaphore(value: 0)
        let signaller = TKThread(name: "signaller") {
            semaphore.signal()
            signalled.signal()
            release.wait()
        }
        signaller.start()
        signalled.wait()
        semaphore.wait() // takes the signaller's unit at once
        let waiter = TKThread(name: "sem-waiter") { semaphore.wait() }
        waiter.start()
        let deadline = ContinuousClock.now + .seconds(30)
        var dump = TKDiagnostics.captureThreadDump(includingStacks: false)
        while dump.threads.first(where: { $0.name == "sem-waiter" })?.wait == nil && ContinuousClock.now < deadline {
            usleep(1_000)
            dump = TKDiagnostics.captureThreadDump(includingStacks: false)
        }
        semaphore.signal()
        release.signal()
        waiter.join()
        signaller.join()
        let wait = try XCTUnwrap(dump.threads.first { $0.name == "sem-waiter" }?.wait, "the semaphore wait was never recorded")
        let signallerID = try XCTUnwrap(dump.threads.first { $0.name == "signaller" }?.threadID, dump.description)
        XCTAssertEqual(wait.kind, .semaphore)
        XCTAssertEqual(wait.call, "TKDispatchSemaphore.wait()")
        XCTAssertNil(wait.holderThreadID, "a semaphore has no holder, only a hint")
        XCTAssertEqual(wait.holder, "last signalled by thread \(signallerID) \"signaller\"")
        XCTAssertTrue(dump.deadlocks.isEmpty)
    }

    // MARK: Helpers

    /// Runs `deadlock KIND` and checks that the dump names one deadlock whose edges are `expected`
    /// (thread name or nil for any, call, object, relation), in order from the edge of thread
    /// `expected[0]`, each holder being the next edge's thread.
    private func assertDeadlock(
        _ kind: String, _ expected: [(thread: String?, call: String, object: String, relation: String)],
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let result = try ChildProcess.run("deadlock", [kind])
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError, file: file, line: line)
        XCTAssertEqual(result.standardOutput, "    (child: 1 deadlock(s) named)\n", file: file, line: line)
        let dump = result.standardError
        let lines = dump.split(separator: "\n").map(String.init)
        let header = try XCTUnwrap(lines.firstIndex(of: "ThreadKit deadlock: 2 threads wait for each other in a cycle:"), dump)
        let pattern = try NSRegularExpression(
            pattern: #"^  thread (\d+) "([^"]*)" waits in (\S+) for (.+), (held by|run by|running as) thread (\d+) "([^"]*)"$"#)
        var edges: [(tid: String, name: String, call: String, object: String, relation: String, holder: String)] = []
        for text in lines[(header + 1)...].prefix(2) {
            let range = NSRange(text.startIndex..., in: text)
            let match = try XCTUnwrap(pattern.firstMatch(in: text, range: range), "not an edge: \(text)\n\(dump)", file: file, line: line)
            func group(_ i: Int) -> String { String(text[Range(match.range(at: i), in: text)!]) }
            edges.append((group(1), group(2), group(3), group(4), group(5), group(6)))
        }
        XCTAssertTrue(lines[header + 3].hasPrefix("  Fix: "), dump, file: file, line: line)
        // Start from the first expected thread's edge (the dump starts at the smallest thread id).
        if let first = expected[0].thread, edges.first?.name != first { edges.reverse() }
        XCTAssertEqual(edges.count, expected.count, dump, file: file, line: line)
        for (index, (edge, want)) in zip(edges, expected).enumerated() {
            if let name = want.thread { XCTAssertEqual(edge.name, name, dump, file: file, line: line) }
            XCTAssertEqual(edge.call, want.call, dump, file: file, line: line)
            XCTAssertEqual(edge.object, want.object, dump, file: file, line: line)
            XCTAssertEqual(edge.relation, want.relation, dump, file: file, line: line)
            XCTAssertEqual(
                edge.holder, edges[(index + 1) % edges.count].tid, "edge \(index) is not held by the next thread\n\(dump)", file: file,
                line: line)
            XCTAssertNotEqual(edge.tid, edge.holder, dump, file: file, line: line)
        }
        // The threads' own entries agree with the cycle and carry their stacks.
        for edge in edges {
            XCTAssertTrue(
                dump.contains("thread \(edge.tid) \"\(edge.name)\" (QoS "), "no entry for thread \(edge.tid)\n\(dump)", file: file,
                line: line)
        }
        // ThreadKit's frames are folded (docs/Diagnostics.md §7): the call-site line says how deep
        // inside ThreadKit the thread is, its innermost Swift frame — the futex wait of a parked thread.
        XCTAssertTrue(
            dump.contains("down to static SystemCall.futexWait") || dump.contains("Parking.park"),
            "no sampled stack shows a parked thread\n\(dump)", file: file, line: line)
    }

    /// The id in the dump's entry line `thread ID "name" (QoS …`.
    private func threadID(named name: String, in dump: String) -> String? {
        for line in dump.split(separator: "\n") where line.hasPrefix("thread ") && line.contains(" \"\(name)\" (QoS ") {
            return line.split(separator: " ")[1].description
        }
        return nil
    }
}

/// A pipe read as it fills, on a background thread; `wait(until:_:)` polls what has arrived.
private final class StreamedPipe: @unchecked Sendable {
    let pipe = Pipe()
    private let lock = NSLock()
    private var data = Data() // guarded by lock

    init() {
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            guard let self else { return }
            if chunk.isEmpty {
                handle.readabilityHandler = nil
                return
            }
            self.lock.lock()
            self.data.append(chunk)
            self.lock.unlock()
        }
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }

    /// Polls (every 5 ms, as ChildProcess does) until `condition` holds for the text so far.
    func wait(until deadline: ContinuousClock.Instant, _ condition: (String) -> Bool) -> Bool {
        while !condition(text) {
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return true
    }
}
