// TKDistributedLock: within one process, and across real processes — a holder killed with
// SIGKILL followed by breakLock, 4 processes taking turns with a never-overlapping log, and a
// record from another host that is never reported dead.
import Foundation
import ThreadKit
import XCTest

final class DistributedLockTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        var template = Array((NSTemporaryDirectory() + "tk-dlock-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        directory = String(cString: made)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private var lockPath: String { directory + "/resource.lock" }

    func testTryLockUnlockAndLockDate() throws {
        let lock = try TKDistributedLock(path: lockPath)
        XCTAssertNil(lock.lockDate)
        let before = Date()
        XCTAssertTrue(lock.tryLock())
        let date = try XCTUnwrap(lock.lockDate)
        XCTAssertGreaterThanOrEqual(date.timeIntervalSince1970, before.timeIntervalSince1970 - 1)
        XCTAssertLessThanOrEqual(date, Date())
        XCTAssertEqual(lock.holder?.pid, getpid())
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        XCTAssertFalse(lock.tryLock(), "not recursive: held by this object already")
        try lock.unlock()
        XCTAssertNil(lock.lockDate)
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(leftovers, [], "temporary files were left behind")
    }

    func testASecondObjectCannotTakeAHeldLock() throws {
        let first = try TKDistributedLock(path: lockPath)
        let second = try TKDistributedLock(path: lockPath)
        XCTAssertTrue(first.tryLock())
        XCTAssertFalse(second.tryLock())
        XCTAssertNotNil(second.lockDate)
        XCTAssertThrowsError(try second.unlock()) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
        try first.unlock()
        XCTAssertTrue(second.tryLock())
        try second.unlock()
    }

    func testUnlockAfterTheLockWasBrokenThrows() throws {
        let holder = try TKDistributedLock(path: lockPath)
        let breaker = try TKDistributedLock(path: lockPath)
        XCTAssertTrue(holder.tryLock())
        try breaker.breakLock()
        XCTAssertTrue(breaker.tryLock())
        XCTAssertThrowsError(try holder.unlock()) { error in
            XCTAssertEqual((error as? TKError)?.code, .notLockOwner)
            XCTAssertTrue((error as? TKError)?.message.contains("broken") ?? false)
        }
        XCTAssertEqual(breaker.holder?.pid, getpid())
        XCTAssertNotNil(breaker.lockDate, "the new holder's lock must survive the old holder's unlock")
        try breaker.unlock()
        try breaker.breakLock() // nobody holds it: not an error
    }

    func testAPathInAMissingDirectoryThrows() {
        XCTAssertThrowsError(try TKDistributedLock(path: directory + "/missing/x.lock")) { error in
            XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
            XCTAssertTrue((error as? TKError)?.message.contains("does not exist") ?? false)
        }
    }

    func testAHolderKilledWithSIGKILLKeepsTheLockUntilBreakLock() throws {
        let out = Pipe()
        let child = try ChildProcess.start("dlock-hold", [lockPath], stdout: out)
        let line = LineReader(out)
        XCTAssertEqual(line.next(timeout: 30), "    child \(child.processIdentifier): locked")
        let lock = try TKDistributedLock(path: lockPath)
        XCTAssertFalse(lock.tryLock())
        XCTAssertEqual(lock.holder?.pid, child.processIdentifier)
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        XCTAssertEqual(child.terminationReason, .uncaughtSignal)
        XCTAssertFalse(lock.tryLock(), "a crashed holder leaves the lock taken")
        XCTAssertEqual(lock.holder?.isDefinitelyDead, true)
        try lock.breakLock()
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
    }

    func testEightProcessesRacingOnAStaleLockBreakItExactlyOnce() throws {
        // A holder killed with SIGKILL leaves a stale lock.
        let out = Pipe()
        let holder = try ChildProcess.start("dlock-hold", [lockPath], stdout: out)
        XCTAssertNotNil(LineReader(out).next(timeout: 30))
        kill(holder.processIdentifier, SIGKILL)
        holder.waitUntilExit()
        let lock = try TKDistributedLock(path: lockPath)
        XCTAssertEqual(lock.holder?.isDefinitelyDead, true)
        // Eight processes released together each try to break it and then to take it.
        let go = directory + "/go"
        let done = directory + "/done"
        let pipes = (0..<8).map { _ in Pipe() }
        let racers = try pipes.map { try ChildProcess.start("dlock-break-race", [lockPath, go, done], stdout: $0) }
        let readers = pipes.map { LineReader($0) }
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: Data()))
        let lines = readers.compactMap { $0.next(timeout: 60) }
        XCTAssertTrue(FileManager.default.createFile(atPath: done, contents: Data()))
        for racer in racers {
            racer.waitUntilExit()
            XCTAssertEqual(racer.terminationStatus, 0)
        }
        XCTAssertEqual(lines.count, 8)
        XCTAssertEqual(lines.filter { $0.hasPrefix("broke=true") }.count, 1, "\(lines)")
        XCTAssertEqual(lines.filter { $0.hasSuffix("acquired=true") }.count, 1, "\(lines)")
    }

    func testALiveHolderIsNeverBrokenConditionally() throws {
        let holder = try TKDistributedLock(path: lockPath)
        let other = try TKDistributedLock(path: lockPath)
        XCTAssertTrue(holder.tryLock())
        XCTAssertFalse(try other.breakLockIfHolderIsDead())
        XCTAssertFalse(other.tryLock())
        try holder.unlock()
    }

    func testFourProcessesTakeTurnsWithoutOverlap() throws {
        let log = directory + "/log.txt"
        let rounds = stress(150)
        let children = try (0..<4).map { _ in try ChildProcess.start("dlock-loop", [lockPath, log, "\(rounds)"]) }
        for child in children {
            child.waitUntilExit()
            XCTAssertEqual(child.terminationStatus, 0)
        }
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.count, 4 * rounds * 2)
        var inside: Substring?
        for line in lines {
            let parts = line.split(separator: " ")
            if parts[0] == "enter" {
                XCTAssertNil(inside, "\(parts[1]) entered while \(inside ?? "") was inside")
                inside = parts[1]
            } else {
                XCTAssertEqual(inside, parts[1], "exit by a process that was not inside")
                inside = nil
            }
        }
        for child in children {
            XCTAssertEqual(lines.filter { $0 == "enter \(child.processIdentifier)" }.count, rounds)
        }
    }

    func testALockHeldFromAnotherHostIsNeverReportedDead() throws {
        // An owner record written by a process on another host, with a pid that does not exist here.
        let record = "some-other-host\n999999\n1\n1700000000\n"
        XCTAssertTrue(FileManager.default.createFile(atPath: lockPath, contents: Data(record.utf8)))
        let lock = try TKDistributedLock(path: lockPath)
        XCTAssertFalse(lock.tryLock())
        XCTAssertEqual(lock.holder?.host, "some-other-host")
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        XCTAssertEqual(lock.lockDate, Date(timeIntervalSince1970: 1_700_000_000))
    }
}

/// Reads lines from a pipe on a background thread; `next` waits for one with a deadline.
final class LineReader: @unchecked Sendable {
    private let condition = NSCondition()
    private var lines: [String] = [] // guarded by condition
    private var partial = "" // reader thread only

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let data = handle.availableData
                if data.isEmpty { return }
                partial += String(decoding: data, as: UTF8.self)
                while let newline = partial.firstIndex(of: "\n") {
                    let line = String(partial[..<newline])
                    partial.removeSubrange(...newline)
                    condition.lock()
                    lines.append(line)
                    condition.broadcast()
                    condition.unlock()
                }
            }
        }
    }

    func next(timeout: TimeInterval) -> String? {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date() + timeout
        while lines.isEmpty { if !condition.wait(until: deadline) { return nil } }
        return lines.removeFirst()
    }
}
