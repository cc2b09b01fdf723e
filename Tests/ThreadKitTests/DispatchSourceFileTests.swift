// Read and write sources on descriptors epoll refuses (issue 15 item 5, issue 14's "Dispatch
// surface"): a regular file, /dev/null. libdispatch treats them as always ready: a read source on
// a regular file delivers the bytes left from the file offset to its end, again after each handler
// run, and a write source fires. A descriptor that is not open is refused with a message (exit
// tests). Judged by Foundation's semaphores and by reading the file back with `pread`.
import Dispatch
import Foundation
import Synchronization
import Testing
import ThreadKit
import XCTest

final class DispatchSourceFileTests: XCTestCase {
    private func temporaryFile(_ bytes: [UInt8]) -> (path: String, fd: Int32) {
        let path = NSTemporaryDirectory() + "tk-source-\(UUID().uuidString)"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        let fd = open(path, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        return (path, fd)
    }

    /// Runs `body` on a Foundation thread and reports whether it returned within 30 s (a deadlock
    /// in activate() must fail the test, not hang the suite).
    private func returnsInTime(_ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            body()
            done.signal()
        }
        return done.wait(timeout: .now() + 30) == .success
    }

    func testAReadSourceOnARegularFileDeliversTheRemainingSizeUntilTheEnd() {
        let content = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let (path, fd) = temporaryFile(content)
        defer { unlink(path) }
        let queue = TKDispatchQueue(label: "file-reader")
        let source = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        let dataSeen = Shared<[UInt]>([]) // queue only
        let received = Shared<[UInt8]>([]) // queue only
        let finished = DispatchSemaphore(value: 0)
        source.setEventHandler {
            let available = source.data
            dataSeen.value.append(available)
            if available == 0 {
                source.cancel()
                return
            }
            var buffer = [UInt8](repeating: 0, count: 3_000) // less than the file: several runs
            let n = read(fd, &buffer, buffer.count)
            if n > 0 { received.value += buffer[0..<n] }
        }
        source.setCancelHandler {
            close(fd)
            finished.signal()
        }
        XCTAssertTrue(returnsInTime { source.activate() }, "activate() on a regular file deadlocked")
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success)
        queue.sync {}
        XCTAssertEqual(received.value, content)
        // Each run saw what was left from the offset to the end: 10000, 7000, 4000, 1000, then 0.
        XCTAssertEqual(dataSeen.value, [10_000, 7_000, 4_000, 1_000, 0])
    }

    func testResumingAReadSourceOnARegularFileDoesNotDeadlock() {
        let (path, fd) = temporaryFile(Array("hello".utf8))
        defer {
            unlink(path)
            close(fd)
        }
        let source = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
        let first = DispatchSemaphore(value: 0)
        let seen = Atomic<UInt>(.max)
        source.setEventHandler {
            if seen.compareExchange(expected: .max, desired: source.data, ordering: .relaxed).exchanged { first.signal() }
        }
        XCTAssertTrue(returnsInTime { source.resume() }, "resume() on a regular file deadlocked")
        XCTAssertEqual(first.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(seen.load(ordering: .relaxed), 5)
        let cancelled = DispatchSemaphore(value: 0)
        source.setCancelHandler { cancelled.signal() }
        source.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success)
    }

    func testAWriteSourceOnARegularFileFiresAndItsWritesLand() {
        let (path, fd) = temporaryFile([])
        defer {
            unlink(path)
            close(fd)
        }
        let queue = TKDispatchQueue(label: "file-writer")
        let source = TKDispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        let chunks = Shared(0) // queue only
        let done = DispatchSemaphore(value: 0)
        source.setEventHandler {
            XCTAssertEqual(source.data, 1)
            let line = Array("line \(chunks.value)\n".utf8)
            _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            chunks.value += 1
            if chunks.value == 5 { source.cancel() }
        }
        source.setCancelHandler { done.signal() }
        XCTAssertTrue(returnsInTime { source.activate() }, "activate() of a write source on a regular file deadlocked")
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        let text = try? String(contentsOfFile: path, encoding: .utf8)
        XCTAssertEqual(text, (0..<5).map { "line \($0)\n" }.joined())
    }

    func testSourcesOnDevNullAreAlwaysReady() {
        // epoll refuses /dev/null (EPERM) as it does regular files.
        let fd = open("/dev/null", O_RDWR)
        defer { close(fd) }
        let writes = DispatchSemaphore(value: 0)
        let reads = DispatchSemaphore(value: 0)
        let writer = TKDispatchSource.makeWriteSource(fileDescriptor: fd, queue: .global())
        writer.setEventHandler {
            writer.cancel()
            writes.signal()
        }
        let reader = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
        reader.setEventHandler {
            reader.cancel()
            reads.signal()
        }
        XCTAssertTrue(
            returnsInTime {
                writer.activate()
                reader.activate()
            })
        XCTAssertEqual(writes.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(reads.wait(timeout: .now() + 30), .success)
    }

    func testAReadSourceOnARegularFileAndOneOnAPipeShareTheManager() {
        // A file source must not disturb epoll-watched sources (its always-ready runs go through
        // the queue, not the manager thread).
        let (path, fd) = temporaryFile(Array(repeating: 1, count: 100))
        defer {
            unlink(path)
            close(fd)
        }
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pair), 0)
        let pipeFDs = pair
        defer {
            close(pipeFDs[0])
            close(pipeFDs[1])
        }
        let file = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
        let fileRuns = Atomic<Int>(0)
        file.setEventHandler { fileRuns.wrappingAdd(1, ordering: .relaxed) } // never reads: stays ready
        file.activate()
        let piped = DispatchSemaphore(value: 0)
        let reader = TKDispatchSource.makeReadSource(fileDescriptor: pipeFDs[0], queue: .global())
        reader.setEventHandler {
            var byte: UInt8 = 0
            if read(pipeFDs[0], &byte, 1) == 1 && byte == 42 {
                reader.cancel()
                piped.signal()
            }
        }
        reader.activate()
        var byte: UInt8 = 42
        XCTAssertEqual(write(pipeFDs[1], &byte, 1), 1)
        XCTAssertEqual(piped.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) { fileRuns.load(ordering: .relaxed) >= 2 },
            "an always-ready source runs again after each run")
        let cancelled = DispatchSemaphore(value: 0)
        file.setCancelHandler { cancelled.signal() }
        file.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success)
    }
}

/// Descriptors that are not open, each an exit test (Support/MisuseAssertions.swift).
@Suite struct DispatchSourceFileExitTests {
    @Test func aReadSourceOnFDMinusOneIsRefusedWithAMessage() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDispatchSource.makeReadSource(fileDescriptor: -1, queue: .global()).activate()
        }
        expectMisuse(result, mentions: ["makeReadSource(fileDescriptor: -1)", "not open", "Fix:"])
    }

    @Test func aWriteSourceOnAClosedDescriptorIsRefusedWithAMessage() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            // A high number, closed: the descriptors opened meanwhile by this process's other
            // threads take the lowest free numbers, never this one.
            let opened = open("/dev/null", O_WRONLY)
            let fd = dup2(opened, 201)
            close(opened)
            close(fd)
            TKDispatchSource.makeWriteSource(fileDescriptor: fd, queue: .global()).activate()
        }
        expectMisuse(result, mentions: ["makeWriteSource(fileDescriptor:", "not open", "Fix:"])
    }

    @Test func aDescriptorClosedBeforeActivationIsReportedAtActivate() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var fds: [Int32] = [0, 0]
            _ = pipe(&fds)
            // A high number, so the descriptors ThreadKit opens meanwhile do not take it again.
            let fd = dup2(fds[0], 200)
            let source = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
            close(fd)
            source.activate()
        }
        expectMisuse(result, mentions: ["TKDispatchSource (read fd", "activate()", "closed", "Fix:"])
    }
}
