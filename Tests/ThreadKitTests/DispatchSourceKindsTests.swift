// Process, file-system object and memory-pressure sources (issue 14, "Dispatch surface"). Judged
// by what the test itself does to the world — a child process it terminates (Foundation's
// Process), a file it writes, chmods, links, renames and unlinks (Glibc calls) — recorded under a
// pthread mutex. Memory pressure cannot be made on demand here: the PSI triggers are checked to
// open and close, and the level logic is driven through the trigger entry point (@testable).
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

final class DispatchSourceKindsTests: XCTestCase {
    private typealias FSEvent = TKDispatchSource.FileSystemEvent

    private func openFDCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    // MARK: Process sources

    func testAProcessSourceReportsTheExitOfAChild() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["30"]
        try child.run()
        let source = try TKDispatchSource.makeProcessSource(identifier: child.processIdentifier, eventMask: .exit, queue: .global())
        XCTAssertEqual(source.handle, child.processIdentifier)
        XCTAssertEqual(source.mask, TKDispatchSource.ProcessEvent.exit.rawValue)
        let exited = DispatchSemaphore(value: 0)
        let seen = Guarded<UInt>(0)
        source.setEventHandler {
            seen.withLock { $0 |= source.data }
            exited.signal()
        }
        source.activate()
        XCTAssertEqual(exited.wait(timeout: .now() + .milliseconds(20)), .timedOut, "reported an exit while the child ran")
        child.terminate()
        XCTAssertEqual(exited.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(seen.withLock { $0 }, TKDispatchSource.ProcessEvent.exit.rawValue)
        child.waitUntilExit()
        source.cancel()
    }

    func testAProcessThatIsAlreadyGoneReportsExitAtOnce() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        try child.run()
        child.waitUntilExit() // reaped: the pid names no process now
        let source = try TKDispatchSource.makeProcessSource(identifier: child.processIdentifier, eventMask: .exit, queue: .global())
        let exited = DispatchSemaphore(value: 0)
        source.setEventHandler {
            if TKDispatchSource.ProcessEvent(rawValue: source.data) == .exit { exited.signal() }
        }
        source.activate()
        XCTAssertEqual(exited.wait(timeout: .now() + 30), .success)
        source.cancel()
    }

    func testSignalEventsOfAnotherProcessAreRefusedWithAReason() {
        XCTAssertThrowsError(try TKDispatchSource.makeProcessSource(identifier: 1, eventMask: .signal, queue: .global())) { error in
            let e = error as? TKError
            XCTAssertEqual(e?.code, .invalidArgument)
            XCTAssertTrue(e?.message.contains("only for the calling process") == true, "\(error)")
        }
        XCTAssertThrowsError(try TKDispatchSource.makeProcessSource(identifier: getpid(), eventMask: [], queue: .global()))
        XCTAssertThrowsError(try TKDispatchSource.makeProcessSource(identifier: -5, eventMask: .exit, queue: .global()))
    }

    func testAProcessSourceOnThisProcessSeesACaughtSignal() throws {
        let result = try ChildProcess.run("dispatch-process-source-signal")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        XCTAssertTrue(result.standardOutput.contains("process source saw the signal"), result.standardOutput)
    }

    func testCancelledProcessSourcesCloseTheirPidfds() throws {
        let warm = try TKDispatchSource.makeProcessSource(identifier: getpid(), eventMask: .exit, queue: .global())
        warm.activate()
        warm.cancel()
        let before = openFDCount()
        for _ in 0..<50 {
            let s = try TKDispatchSource.makeProcessSource(identifier: getpid(), eventMask: .exit, queue: .global())
            s.activate()
            s.cancel()
        }
        for _ in 0..<50 { _ = try TKDispatchSource.makeProcessSource(identifier: getpid(), eventMask: .exit, queue: .global()) }
        XCTAssertEqual(openFDCount(), before, "pidfds leaked")
    }

    // MARK: File-system object sources

    /// A temporary file open read-only, a source on it with `mask`, and the events seen so far.
    private final class Watched: @unchecked Sendable {
        let path: String
        let fd: Int32
        let source: TKDispatchSource
        let seen = Guarded<UInt>(0)
        init(mask: FSEvent, directory: Bool = false) throws {
            path = NSTemporaryDirectory() + "tk-vnode-\(UUID().uuidString)"
            if directory {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
                fd = open(path, O_RDONLY | O_DIRECTORY)
            } else {
                _ = FileManager.default.createFile(atPath: path, contents: Data("start".utf8))
                fd = open(path, O_RDONLY)
            }
            source = try TKDispatchSource.makeFileSystemObjectSource(fileDescriptor: fd, eventMask: mask, queue: .global())
            let source = self.source
            let seen = self.seen
            source.setEventHandler { seen.withLock { $0 |= source.data } }
            source.activate()
        }
        func waitFor(_ events: FSEvent) -> Bool {
            waitUntil(.now + .seconds(30)) { FSEvent(rawValue: seen.withLock { $0 }).isSuperset(of: events) }
        }
        var events: FSEvent { FSEvent(rawValue: seen.withLock { $0 }) }
        func finish() {
            let done = DispatchSemaphore(value: 0)
            source.setCancelHandler { done.signal() }
            source.cancel()
            _ = done.wait(timeout: .now() + 30)
            close(fd)
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    private func append(_ path: String, _ text: String) {
        let fd = open(path, O_WRONLY | O_APPEND)
        _ = text.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }

    func testAWriteThatGrowsTheFileIsReportedAsWriteAndExtend() throws {
        let w = try Watched(mask: .all)
        defer { w.finish() }
        append(w.path, " and more")
        XCTAssertTrue(w.waitFor([.write, .extend]), "saw \(w.events)")
    }

    func testChmodIsAttribLinkIsLinkRenameIsRenameUnlinkIsDelete() throws {
        let w = try Watched(mask: .all)
        defer { w.finish() }
        XCTAssertEqual(chmod(w.path, 0o600), 0)
        XCTAssertTrue(w.waitFor(.attrib), "saw \(w.events)")
        let second = w.path + ".link"
        XCTAssertEqual(link(w.path, second), 0)
        XCTAssertTrue(w.waitFor(.link), "saw \(w.events)")
        let moved = w.path + ".moved"
        XCTAssertEqual(rename(w.path, moved), 0)
        XCTAssertTrue(w.waitFor(.rename), "saw \(w.events)")
        XCTAssertEqual(unlink(second), 0)
        XCTAssertEqual(unlink(moved), 0)
        XCTAssertTrue(w.waitFor(.delete), "saw \(w.events)")
    }

    func testOnlyTheEventsOfTheMaskAreDelivered() throws {
        let w = try Watched(mask: .delete)
        defer { w.finish() }
        append(w.path, "x")
        XCTAssertEqual(chmod(w.path, 0o600), 0)
        XCTAssertEqual(unlink(w.path), 0)
        XCTAssertTrue(w.waitFor(.delete))
        XCTAssertEqual(w.events, .delete, "events outside the mask were delivered")
    }

    func testADirectorySourceReportsEntriesCreatedAsWrite() throws {
        let w = try Watched(mask: .write, directory: true)
        defer { w.finish() }
        _ = FileManager.default.createFile(atPath: w.path + "/entry", contents: Data())
        XCTAssertTrue(w.waitFor(.write), "saw \(w.events)")
        try? FileManager.default.removeItem(atPath: w.path + "/entry")
    }

    func testTwoSourcesOnOneFileBothSeeItsEventsAndCancellingOneKeepsTheOther() throws {
        let w = try Watched(mask: .all)
        defer { w.finish() }
        let second = try TKDispatchSource.makeFileSystemObjectSource(fileDescriptor: w.fd, eventMask: .attrib, queue: .global())
        let seen = DispatchSemaphore(value: 0)
        second.setEventHandler { seen.signal() }
        second.activate()
        XCTAssertEqual(chmod(w.path, 0o640), 0)
        XCTAssertEqual(seen.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(w.waitFor(.attrib))
        second.cancel()
        append(w.path, "still watched")
        XCTAssertTrue(w.waitFor(.write), "cancelling one source removed the other's watch")
    }

    func testBadArgumentsAreRefusedWithAnError() {
        XCTAssertThrowsError(try TKDispatchSource.makeFileSystemObjectSource(fileDescriptor: -1, eventMask: .write, queue: .global())) {
            XCTAssertTrue(($0 as? TKError)?.message.contains("not open") == true, "\($0)")
        }
        XCTAssertThrowsError(try TKDispatchSource.makeFileSystemObjectSource(fileDescriptor: 0, eventMask: [], queue: .global()))
    }

    // MARK: Memory pressure

    func testAMemoryPressureSourceOpensAndClosesItsPSITriggers() throws {
        guard FileManager.default.fileExists(atPath: "/proc/pressure/memory") else {
            XCTAssertThrowsError(try TKDispatchSource.makeMemoryPressureSource(eventMask: .all, queue: .global())) {
                XCTAssertTrue("\($0)".contains("PSI"), "\($0)")
            }
            return
        }
        let before = openFDCount()
        let source = try TKDispatchSource.makeMemoryPressureSource(eventMask: .all, queue: .global())
        XCTAssertEqual(openFDCount(), before + 2, "a warning and a critical trigger")
        let cancelled = DispatchSemaphore(value: 0)
        source.setCancelHandler { cancelled.signal() }
        source.activate()
        source.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(openFDCount(), before)
        XCTAssertThrowsError(try TKDispatchSource.makeMemoryPressureSource(eventMask: [], queue: .global()))
    }

    func testPressureLevelsRiseAtOnceAndFallBackToNormalAfterTheHold() throws {
        guard FileManager.default.fileExists(atPath: "/proc/pressure/memory") else { throw XCTSkip("no PSI on this kernel") }
        let queue = TKDispatchQueue(label: "pressure")
        let source = try TKDispatchSource.makeMemoryPressureSource(eventMask: .all, queue: queue, hold: .milliseconds(50))
        let levels = Guarded<[UInt]>([])
        source.setEventHandler { levels.withLock { $0.append(source.data) } }
        source.activate()
        let start = ContinuousClock.now
        source.pressureTriggered(critical: false)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { levels.withLock { $0.count } >= 2 })
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(50), "fell back before the hold")
        source.pressureTriggered(critical: true)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { levels.withLock { $0.count } >= 4 })
        typealias L = TKDispatchSource.MemoryPressureEvent
        XCTAssertEqual(levels.withLock { $0 }, [L.warning, .normal, .critical, .normal].map(\.rawValue))
        source.cancel()
    }

    func testAPressureSourceForCriticalOnlyIgnoresWarnings() throws {
        guard FileManager.default.fileExists(atPath: "/proc/pressure/memory") else { throw XCTSkip("no PSI on this kernel") }
        let queue = TKDispatchQueue(label: "pressure")
        let source = try TKDispatchSource.makeMemoryPressureSource(eventMask: .critical, queue: queue, hold: .seconds(30))
        let levels = Guarded<[UInt]>([])
        source.setEventHandler { levels.withLock { $0.append(source.data) } }
        source.activate()
        source.pressureTriggered(critical: false)
        source.pressureTriggered(critical: true)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { !levels.withLock { $0 }.isEmpty })
        queue.sync {}
        XCTAssertEqual(levels.withLock { $0 }, [TKDispatchSource.MemoryPressureEvent.critical.rawValue])
        source.cancel()
    }
}
