// TKDistributedLock in a directory shared with another user (issue 15, items 9–11): a holder is
// broken only when its death is proved — never one in another PID namespace (a real holder under
// `unshare --pid`), one whose /proc entry is hidden (a checker running as nobody with /proc
// mounted hidepid=2 in its own mount namespace), or one from another boot; a FIFO at the lock
// path and a symbolic link or FIFO at the break guard are reported, never blocked on or followed;
// a break guard held forever is waited for at most the given limit; tryLock in a directory the
// process may not write says why (a child running as nobody: root ignores file modes).
import Foundation
import ThreadKit
import XCTest

final class DistributedLockSharedDirectoryTests: XCTestCase {
    private var directory = ""
    private var lockPath: String { directory + "/resource.lock" }

    override func setUpWithError() throws {
        var template = Array((NSTemporaryDirectory() + "tk-dlock-shared-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        directory = String(cString: made)
        chmod(directory, 0o1777) // shared, sticky: as /tmp
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: Records

    private static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, 255)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static var pidNamespace: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")) ?? ""
    }

    private static var bootID: String {
        ((try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A pid no process can have (above the largest pid_max), so kill(pid, 0) fails with ESRCH.
    private static let deadPID: Int32 = 4_194_305

    private func writeRecord(pid: Int32 = deadPID, boot: String = bootID, namespace: String? = pidNamespace) {
        var record = "\(Self.hostName)\n\(pid)\n1\n1700000000\nnonce\n"
        if let namespace { record += "\(boot)\n\(namespace)\n" }
        XCTAssertTrue(FileManager.default.createFile(atPath: lockPath, contents: Data(record.utf8)))
    }

    /// Runs `body` on another thread and fails (instead of hanging) if it does not return in 30 s.
    private func withinDeadline(_ what: String, _ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            body()
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "\(what) blocked")
    }

    // MARK: 9. Never break what cannot be proved dead

    func testOnlyARecordOfThisBootAndNamespaceIsProvedDead() throws {
        let lock = try TKDistributedLock(path: lockPath)
        writeRecord()
        XCTAssertEqual(lock.holder?.isDefinitelyDead, true, lock.holder?.verdict ?? "")
        writeRecord(boot: "00000000-0000-0000-0000-000000000000")
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        XCTAssertTrue(lock.holder?.verdict.contains("another boot") ?? false, lock.holder?.verdict ?? "")
        XCTAssertFalse(try lock.breakLockIfHolderIsDead())
        writeRecord(namespace: "pid:[1]")
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        XCTAssertTrue(lock.holder?.verdict.contains("another PID namespace") ?? false, lock.holder?.verdict ?? "")
        writeRecord(namespace: nil) // an older record: no boot, no namespace
        XCTAssertEqual(lock.holder?.isDefinitelyDead, false)
        XCTAssertFalse(try lock.breakLockIfHolderIsDead())
        XCTAssertTrue(FileManager.default.fileExists(atPath: lockPath))
    }

    func testAHolderInAnotherPIDNamespaceIsNeverBroken() throws {
        let unshare = Process()
        unshare.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        unshare.arguments = ["--pid", "--fork", "--mount-proc", "--kill-child", ChildProcess.executable.path, "dlock-hold", lockPath]
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        unshare.environment = environment
        let out = Pipe()
        unshare.standardOutput = out
        unshare.standardError = Pipe()
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"), (try? unshare.run()) != nil else {
            throw XCTSkip("unshare is not available")
        }
        defer {
            kill(unshare.processIdentifier, SIGKILL)
            unshare.waitUntilExit()
        }
        guard let line = LineReader(out).next(timeout: 30) else { throw XCTSkip("no holder in a new PID namespace (unshare refused)") }
        XCTAssertTrue(line.hasSuffix("locked"), line)
        let lock = try TKDistributedLock(path: lockPath)
        let holder = try XCTUnwrap(lock.holder)
        // Its pid is small in its own namespace; here that pid is some other process (or none).
        XCTAssertEqual(holder.isDefinitelyDead, false, holder.verdict)
        XCTAssertTrue(holder.verdict.contains("another PID namespace"), holder.verdict)
        XCTAssertFalse(try lock.breakLockIfHolderIsDead())
        XCTAssertFalse(lock.tryLock())
    }

    func testAHolderWhoseProcIsHiddenIsNeverBroken() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to mount /proc with hidepid=2 in a mount namespace") }
        let out = Pipe()
        let holder = try ChildProcess.start("dlock-hold", [lockPath], stdout: out)
        defer {
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
        }
        XCTAssertNotNil(LineReader(out).next(timeout: 30))
        let exe = ChildProcess.executable.path
        // The same check as nobody with /proc readable: alive.
        let visible = try ChildProcess.run("dlock-check", [lockPath, "nobody"])
        XCTAssertTrue(
            visible.standardOutput.contains("dead=false verdict=process \(holder.processIdentifier) is alive"),
            visible.standardOutput + visible.standardError)
        // With hidepid=2, nobody cannot see root's holder in /proc: it must not conclude it is dead.
        let script = "mount -t proc -o hidepid=2 proc /proc && SWIFT_BACKTRACE=enable=no exec '\(exe)' dlock-check '\(lockPath)' nobody"
        let hidden = Process()
        hidden.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        hidden.arguments = ["--mount", "--propagation", "private", "sh", "-c", script]
        let hiddenOut = Pipe()
        let hiddenErr = Pipe()
        hidden.standardOutput = hiddenOut
        hidden.standardError = hiddenErr
        guard (try? hidden.run()) != nil else { throw XCTSkip("unshare is not available") }
        let text = DrainedPipe(hiddenOut).text()
        let errors = DrainedPipe(hiddenErr).text()
        hidden.waitUntilExit()
        guard hidden.terminationStatus == 0, text.contains("dead=") else {
            throw XCTSkip("cannot mount /proc with hidepid=2 here: \(errors)")
        }
        XCTAssertTrue(text.contains("dead=false"), text)
        XCTAssertTrue(text.contains("cannot be read (hidepid?)"), text)
        XCTAssertTrue(text.contains("broke=false"), text)
        XCTAssertTrue(FileManager.default.fileExists(atPath: lockPath), "the live holder's lock was broken")
    }

    // MARK: 10. Nothing but regular files is opened; every wait is bounded

    func testAFIFOAtTheLockPathIsReportedAndNeverBlockedOn() throws {
        XCTAssertEqual(mkfifo(lockPath, 0o666), 0)
        chown(lockPath, 65534, 65534) // planted by another user
        let lock = try TKDistributedLock(path: lockPath)
        let seen = Shared<(TKDistributedLock.Holder?, Bool, TKError?, TKError?, TKError?)>((nil, true, nil, nil, nil))
        withinDeadline("reading a FIFO at the lock path") {
            let holder = lock.holder
            let taken = lock.tryLock()
            var thrown: TKError?
            var broke: TKError?
            do { _ = try lock.tryLockOrThrow() } catch { thrown = error as? TKError }
            do { _ = try lock.breakLockIfHolderIsDead() } catch { broke = error as? TKError }
            _ = lock.lockDate
            seen.value = (holder, taken, lock.lastError, thrown, broke)
        }
        let (holder, taken, lastError, thrown, _) = seen.value
        XCTAssertFalse(taken)
        XCTAssertEqual(holder?.isDefinitelyDead, false)
        XCTAssertTrue(holder?.verdict.contains("FIFO") ?? false, holder?.verdict ?? "nil")
        XCTAssertEqual(thrown?.code, .invalidArgument)
        XCTAssertTrue(thrown?.message.contains("a FIFO owned by uid 65534") ?? false, thrown?.message ?? "nil")
        XCTAssertEqual(lastError?.code, .invalidArgument)
        XCTAssertThrowsError(try lock.breakLockIfHolderIsDead(), "a FIFO is no dead holder") { error in
            XCTAssertTrue((error as? TKError)?.message.contains("FIFO") ?? false, "\(error)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: lockPath))
    }

    func testASymbolicLinkAtTheBreakGuardIsReportedAndNeverFollowed() throws {
        writeRecord() // a stale lock: its holder is provably dead
        let target = directory + "/created-through-the-link"
        XCTAssertEqual(symlink(target, lockPath + ".break"), 0)
        let lock = try TKDistributedLock(path: lockPath)
        XCTAssertThrowsError(try lock.breakLockIfHolderIsDead()) { error in
            XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
            XCTAssertTrue((error as? TKError)?.message.contains("symbolic link") ?? false, "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "the breaker created the link's target")
        XCTAssertTrue(FileManager.default.fileExists(atPath: lockPath))
        // A FIFO there instead: reported at once, never blocked on.
        unlink(lockPath + ".break")
        XCTAssertEqual(mkfifo(lockPath + ".break", 0o666), 0)
        let result = Shared<Error?>(nil)
        withinDeadline("opening a FIFO break guard") {
            do { _ = try lock.breakLockIfHolderIsDead() } catch { result.value = error }
        }
        XCTAssertTrue((result.value as? TKError)?.message.contains("FIFO") ?? false, "\(String(describing: result.value))")
    }

    func testABreakGuardHeldForeverIsWaitedForAtMostTheLimit() throws {
        writeRecord()
        let lock = try TKDistributedLock(path: lockPath)
        // Another open file description holds the guard (as a process that never lets go would).
        let fd = open(lockPath + ".break", O_RDONLY | O_CREAT, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        let started = ContinuousClock.now
        XCTAssertThrowsError(try lock.breakLockIfHolderIsDead(waitingAtMost: .milliseconds(200))) { error in
            XCTAssertEqual((error as? TKError)?.code, .systemCall)
            XCTAssertTrue((error as? TKError)?.message.contains("stayed locked") ?? false, "\(error)")
        }
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - started, .milliseconds(200), "gave up early")
        XCTAssertTrue(FileManager.default.fileExists(atPath: lockPath))
        XCTAssertEqual(flock(fd, LOCK_UN), 0)
        XCTAssertTrue(try lock.breakLockIfHolderIsDead())
        XCTAssertTrue(lock.tryLock())
        try lock.unlock()
    }

    // MARK: 11. A directory the process may not write

    func testTryLockInADirectoryItMayNotWriteSaysWhy() throws {
        guard geteuid() == 0 else { throw XCTSkip("runs the check as nobody, which needs root to switch to") }
        let readOnly = directory + "/read-only"
        XCTAssertEqual(mkdir(readOnly, 0o755), 0) // root's: nobody may not write it
        let result = try ChildProcess.run("dlock-readonly", [readOnly + "/x.lock"])
        let out = result.standardOutput
        XCTAssertEqual(result.status, 0, out + result.standardError)
        XCTAssertTrue(out.contains("tryLock=false holder=nil lastError=TKError.systemCall"), out)
        XCTAssertTrue(out.contains("threw TKError.systemCall"), out)
        XCTAssertTrue(out.contains("the directory \"\(readOnly)\" (EACCES"), out)
    }
}
