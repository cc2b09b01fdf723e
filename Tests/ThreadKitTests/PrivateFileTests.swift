// Files ThreadKit writes of its own accord (issue 49, finding 1): the flight recorder's dumps and
// the trace exports never write through a symbolic link or into a FIFO planted at their names,
// are mode 0600, and are refused in a directory another user owns or may replace files in. The
// attacks are planted by this test (as another user, `nobody`, when it runs as root); each is
// judged by the victim file's bytes and by lstat of what was written, never by ThreadKit.
import Foundation
import Glibc
import XCTest

@testable import ThreadKit

final class PrivateFileTests: XCTestCase {
    private var directory: String!
    private var victim: String!
    private let victimText = "root-only secret, must never be replaced\n"

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "tk-private-\(getpid())-\(UUID().uuidString)"
        XCTAssertEqual(mkdir(directory, 0o700), 0)
        victim = directory + "-victim"
        XCTAssertTrue(FileManager.default.createFile(atPath: victim, contents: Data(victimText.utf8)))
        XCTAssertEqual(chmod(victim, 0o600), 0)
    }

    override func tearDown() {
        TKTrace.stop()
        try? FileManager.default.removeItem(atPath: directory)
        try? FileManager.default.removeItem(atPath: victim)
        super.tearDown()
    }

    // MARK: The flight recorder

    /// The names the old recorder used for the next few seconds (`threadkit-flight-<pid>-<time>`,
    /// then `-2`… when taken): a symbolic link to the victim at each `.html`, a FIFO at each
    /// `.json` of the second attempt. A dump must leave the victim whole and not block.
    func testAFlightDumpNeverWritesThroughALinkOrIntoAFIFOPlantedAtItsName() throws {
        let planted = plantAtPredictableNames(in: directory)
        XCTAssertGreaterThan(planted, 0)
        TKTrace.startFlightRecorder(window: .seconds(5))
        TKTrace.mark("before the dump")
        let folder: String = directory
        let written = try dumpWithin(seconds: 30) { try TKTrace.dumpFlight(to: folder) }
        XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), victimText, "the dump wrote through a planted link")
        for path in [written.json, written.html] {
            let status = try linkStatus(path)
            XCTAssertEqual(status.st_mode & S_IFMT, S_IFREG, "\(path) is not a regular file")
            XCTAssertEqual(status.st_mode & 0o777, 0o600, "\(path) is readable by others")
            XCTAssertEqual(status.st_uid, geteuid())
        }
        XCTAssertTrue(try String(contentsOfFile: written.html, encoding: .utf8).contains("before the dump"))
        let json = URL(fileURLWithPath: written.json).lastPathComponent
        // threadkit-flight-<pid>-<yyyymmdd>-<hhmmss>-<12 random>.json
        let random = json.dropLast(".json".count).split(separator: "-").last.map(String.init) ?? ""
        XCTAssertEqual(random.count, 12, json)
        XCTAssertTrue(random.allSatisfy { $0.isNumber || ("a"..."z").contains($0) }, json)
    }

    /// Two dumps in the same second get different, unguessable names.
    func testTwoDumpsInTheSameSecondGetDifferentNames() throws {
        TKTrace.startFlightRecorder(window: .seconds(5))
        let first = try TKTrace.dumpFlight(to: directory)
        let second = try TKTrace.dumpFlight(to: directory)
        XCTAssertNotEqual(first.json, second.json)
        XCTAssertNotEqual(first.html, second.html)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(names.filter { $0.hasPrefix("threadkit-flight-") }.count, 4, "\(names)")
    }

    /// A directory others may write to must be sticky: in one that is not, another user could
    /// rename a dump away and put a link in its place.
    func testAFlightDumpRefusesADirectoryOthersMayReplaceFilesIn() throws {
        XCTAssertEqual(chmod(directory, 0o777), 0)
        TKTrace.startFlightRecorder(window: .seconds(5))
        XCTAssertThrowsError(try TKTrace.dumpFlight(to: directory)) { error in
            let error = error as? TKError
            XCTAssertEqual(error?.code, .systemCall)
            XCTAssertTrue(error?.message.contains("not sticky") ?? false, "\(String(describing: error))")
            XCTAssertTrue(error?.message.contains(self.directory) ?? false, "\(String(describing: error))")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [], "nothing is left behind")
        XCTAssertEqual(chmod(directory, 0o1777), 0) // sticky, as /tmp: accepted
        let written = try TKTrace.dumpFlight(to: directory)
        XCTAssertEqual(try linkStatus(written.json).st_mode & 0o777, 0o600)
    }

    /// As root: a flight directory owned by another user is refused; in a sticky directory
    /// (/tmp's mode) links that user planted at the old names, owned by them and pointing at a
    /// root-only file, are never followed.
    func testAsRootAnotherUsersDirectoryIsRefusedAndTheirLinksAreNeverFollowed() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root, to act as another user (CI runs as root)") }
        let nobody: uid_t = 65_534
        XCTAssertEqual(chown(directory, nobody, gid_t(nobody)), 0)
        TKTrace.startFlightRecorder(window: .seconds(5))
        XCTAssertThrowsError(try TKTrace.dumpFlight(to: directory)) { error in
            XCTAssertTrue((error as? TKError)?.message.contains("owned by uid 65534") ?? false, "\(error)")
        }
        XCTAssertEqual(chown(directory, 0, 0), 0)
        XCTAssertEqual(chmod(directory, 0o1777), 0)
        XCTAssertGreaterThan(plantAtPredictableNames(in: directory, owner: nobody), 0)
        let folder: String = directory
        let written = try dumpWithin(seconds: 30) { try TKTrace.dumpFlight(to: folder) }
        XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), victimText)
        XCTAssertEqual(try linkStatus(written.html).st_mode & S_IFMT, S_IFREG)
    }

    // MARK: Trace exports to a named path

    /// `writeHTML(to:)` and `writeChromeJSON(to:)` at a path where another user planted a
    /// symbolic link to the victim: the link is replaced by a new private file, the victim keeps
    /// its bytes. (Needs root, to plant as another user: a link of one's own is trusted.)
    func testATraceExportReplacesALinkAtItsPathInsteadOfFollowingIt() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root, to plant the link as another user (CI runs as root)") }
        TKTrace.start()
        TKTrace.mark("exported")
        let exports: [(String) throws -> Void] = [{ try TKTrace.writeHTML(to: $0) }, { try TKTrace.writeChromeJSON(to: $0) }]
        for (index, export) in exports.enumerated() {
            let path = directory + "/trace-\(index)"
            XCTAssertEqual(symlink(victim, path), 0)
            if geteuid() == 0 { XCTAssertEqual(lchown(path, 65_534, 65_534), 0) } // planted by another user
            try export(path)
            XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), victimText, "export \(index) wrote through the link")
            let status = try linkStatus(path)
            XCTAssertEqual(status.st_mode & S_IFMT, S_IFREG)
            XCTAssertEqual(status.st_mode & 0o777, 0o600)
            XCTAssertTrue(try String(contentsOfFile: path, encoding: .utf8).contains("exported"))
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".tmp") }
        XCTAssertEqual(left, [], "a temporary file was left behind")
    }

    /// A FIFO at the export's path that nobody reads never blocks the export: one of another
    /// user's is replaced (as root: planted as `nobody`); one of this user's own is refused with
    /// an error naming it.
    func testATraceExportToAPathWhereAFIFOWasPlantedDoesNotBlock() throws {
        let path = directory + "/trace.html"
        XCTAssertEqual(mkfifo(path, 0o666), 0)
        TKTrace.start()
        TKTrace.mark("exported")
        let outcome = try dumpWithin(seconds: 30) { () -> (json: String, html: String) in
            do { try TKTrace.writeHTML(to: path) } catch { return ("\(error)", "") }
            return (path, path)
        }
        XCTAssertTrue(outcome.json.contains("no process is reading"), outcome.json)
        guard geteuid() == 0 else { return }
        XCTAssertEqual(chown(path, 65_534, 65_534), 0) // another user's FIFO: replaced
        _ = try dumpWithin(seconds: 30) { () -> (json: String, html: String) in
            try TKTrace.writeHTML(to: path)
            return (path, path)
        }
        XCTAssertEqual(try linkStatus(path).st_mode & S_IFMT, S_IFREG)
    }

    /// A device or link of root's or this user's is written through: `/dev/null` stays a device.
    func testATraceExportToDevNullWritesThroughIt() throws {
        TKTrace.start()
        TKTrace.mark("discarded")
        try TKTrace.writeChromeJSON(to: "/dev/null")
        XCTAssertEqual(try linkStatus("/dev/null").st_mode & S_IFMT, S_IFCHR)
    }

    /// An export into a directory that does not exist throws naming it and leaves nothing.
    func testATraceExportIntoAMissingDirectoryThrowsNamingIt() {
        let path = directory + "/missing/trace.json"
        XCTAssertThrowsError(try TKTrace.writeChromeJSON(to: path)) { error in
            let error = error as? TKError
            XCTAssertEqual(error?.code, .systemCall)
            XCTAssertEqual(error?.errno, ENOENT)
            XCTAssertTrue(error?.message.contains(path) ?? false, "\(String(describing: error))")
        }
    }

    // MARK: The directory rule, without a file system

    func testTheDirectoryRuleByOwnerAndMode() {
        let me: uid_t = 1000
        XCTAssertNil(PrivateDirectory.problem(owner: me, mode: S_IFDIR | 0o700, user: me))
        XCTAssertNil(PrivateDirectory.problem(owner: me, mode: S_IFDIR | 0o755, user: me))
        XCTAssertNil(PrivateDirectory.problem(owner: 0, mode: S_IFDIR | 0o1777, user: me), "/tmp")
        XCTAssertNil(PrivateDirectory.problem(owner: 0, mode: S_IFDIR | 0o755, user: me), "root's, not writable by us")
        XCTAssertNotNil(PrivateDirectory.problem(owner: 1001, mode: S_IFDIR | 0o700, user: me), "another user's")
        XCTAssertNotNil(PrivateDirectory.problem(owner: 1001, mode: S_IFDIR | 0o1777, user: me), "another user's, sticky")
        XCTAssertNotNil(PrivateDirectory.problem(owner: me, mode: S_IFDIR | 0o777, user: me), "world-writable, not sticky")
        XCTAssertNotNil(PrivateDirectory.problem(owner: me, mode: S_IFDIR | 0o770, user: me), "group-writable, not sticky")
        XCTAssertNil(PrivateDirectory.problem(owner: me, mode: S_IFDIR | 0o1770, user: me))
    }

    // MARK: Helpers

    /// Plants, for this second and the next 20, what a hostile user would at the old predictable
    /// names: a link to the victim at every `.html` and at the first `.json`, a FIFO at the
    /// second attempt's `.json` and `.html`. Owned by `owner` when given. Returns how many.
    private func plantAtPredictableNames(in folder: String, owner: uid_t? = nil) -> Int {
        var planted = 0
        let now = time(nil)
        for offset in 0..<20 {
            var moment = now + offset
            var parts = tm()
            localtime_r(&moment, &parts)
            func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
            let stamp =
                "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))-\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))"
            let stem = folder + "/threadkit-flight-\(getpid())-\(stamp)"
            for link in [stem + ".html", stem + ".json"] where symlink(victim, link) == 0 {
                planted += 1
                if let owner { _ = lchown(link, owner, gid_t(owner)) }
            }
            for fifo in [stem + "-2.json", stem + "-2.html"] where mkfifo(fifo, 0o666) == 0 {
                planted += 1
                if let owner { _ = chown(fifo, owner, gid_t(owner)) }
            }
        }
        return planted
    }

    /// Runs `body` on a thread and waits for it at most `seconds`; a body still blocked then (in a
    /// FIFO's open) fails the test, and the FIFOs in the directory are opened for reading and
    /// drained so that it can finish.
    private func dumpWithin(
        seconds: Int, _ body: @escaping @Sendable () throws -> (json: String, html: String)
    ) throws -> (json: String, html: String) {
        let outcome = Protected<Result<(json: String, html: String), any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let result = Result { try body() }
            outcome.withLock { $0 = result }
            done.signal()
        }
        if done.wait(timeout: .now() + .seconds(seconds)) == .timedOut {
            XCTFail("the write blocked for \(seconds) s (on a planted FIFO)")
            drainFIFOs(in: directory)
            done.wait()
        }
        return try XCTUnwrap(outcome.withLock { $0 }).get()
    }

    private func drainFIFOs(in folder: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            let path = folder + "/" + name
            guard let status = try? linkStatus(path), status.st_mode & S_IFMT == S_IFIFO else { continue }
            Thread.detachNewThread {
                let fd = open(path, O_RDONLY)
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while fd >= 0, read(fd, &buffer, buffer.count) > 0 {}
                close(fd)
            }
        }
    }

    private func linkStatus(_ path: String) throws -> stat {
        var status = stat()
        guard lstat(path, &status) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return status
    }
}
