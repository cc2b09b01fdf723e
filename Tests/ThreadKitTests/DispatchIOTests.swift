// TKDispatchIO (issue 14, "Dispatch surface"), after libdispatch's dispatch_io test programs:
// reading a file in high-water pieces, reading and writing pipes (including a write larger than
// the pipe, which must wait for the reader), low water and interval deliveries, barriers, close
// with and without `.stop`, path channels, the one-shot read/write, and the descriptor's flags
// restored. Judged by bytes the test wrote or read itself with Glibc calls and Foundation threads,
// recorded under a pthread mutex.
import Dispatch
import Foundation
import ThreadKit
import XCTest

final class DispatchIOTests: XCTestCase {
    /// Everything one operation delivered.
    private final class Record: @unchecked Sendable {
        let calls = Guarded<[(done: Bool, count: Int, error: Int32)]>([])
        let bytes = Guarded<[UInt8]>([])
        let done = DispatchSemaphore(value: 0)
        var handler: TKDispatchIO.IOHandler {
            { [self] done, data, error in
                calls.withLock { $0.append((done, data?.count ?? 0, error)) }
                if let data { bytes.withLock { $0 += Array(data) } }
                if done { self.done.signal() }
            }
        }
        func wait() -> Bool { done.wait(timeout: .now() + 30) == .success }
        var last: (done: Bool, count: Int, error: Int32)? { calls.withLock { $0.last } }
    }

    private func temporaryFile(_ bytes: [UInt8]) -> String {
        let path = NSTemporaryDirectory() + "tk-io-\(UUID().uuidString)"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        return path
    }

    private func makePipe() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        return (fds[0], fds[1])
    }

    private func pattern(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) } }

    /// Writes `bytes` to `fd` on a Foundation thread, in `pieces`, then closes it if asked.
    private func feed(_ fd: Int32, _ bytes: [UInt8], pieces: Int = 1, closeAfter: Bool = true) -> DispatchSemaphore {
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let size = max(1, bytes.count / pieces)
            var at = 0
            while at < bytes.count {
                let end = min(bytes.count, at + size)
                let n = bytes[at..<end].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if n > 0 { at += n } else if errno != EINTR && errno != EAGAIN { break }
            }
            if closeAfter { close(fd) }
            finished.signal()
        }
        return finished
    }

    /// Reads `fd` to its end on a Foundation thread.
    private func drain(_ fd: Int32) -> (DispatchSemaphore, Guarded<[UInt8]>) {
        let finished = DispatchSemaphore(value: 0)
        let got = Guarded<[UInt8]>([])
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n > 0 { got.withLock { $0 += buffer[0..<n] } } else if n < 0 && errno == EINTR { continue } else { break }
            }
            finished.signal()
        }
        return (finished, got)
    }

    // MARK: Reading

    func testARandomAccessReadOfAFileComesInHighWaterPieces() {
        let content = pattern(100_000)
        let path = temporaryFile(content)
        defer { unlink(path) }
        let fd = open(path, O_RDONLY)
        let cleaned = DispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: .random, fileDescriptor: fd, queue: .global()) { error in
            XCTAssertEqual(error, 0)
            close(fd)
            cleaned.signal()
        }
        io.setLimit(highWater: 8_192)
        io.setLimit(lowWater: 1)
        let record = Record()
        io.read(offset: 1_000, length: Int.max, queue: TKDispatchQueue(label: "reader"), ioHandler: record.handler)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.bytes.withLock { $0 }, Array(content[1_000...]))
        let calls = record.calls.withLock { $0 }
        XCTAssertTrue(calls.allSatisfy { $0.count <= 8_192 }, "a piece exceeded the high water mark")
        XCTAssertEqual(calls.filter(\.done).count, 1)
        XCTAssertEqual(record.last?.error, 0)
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
    }

    func testAStreamReadOfAPipeRespectsTheLowWaterMarkAndEndsAtEOF() {
        let (r, w) = makePipe()
        let cleaned = DispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: .stream, fileDescriptor: r, queue: .global()) { _ in
            close(r)
            cleaned.signal()
        }
        io.setLimit(lowWater: 10_000)
        let record = Record()
        io.read(offset: 0, length: Int.max, queue: TKDispatchQueue(label: "reader"), ioHandler: record.handler)
        let content = pattern(50_000)
        let fed = feed(w, content, pieces: 25)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(fed.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(record.bytes.withLock { $0 }, content)
        let partial = record.calls.withLock { $0 }.filter { !$0.done }
        XCTAssertTrue(partial.allSatisfy { $0.count >= 10_000 }, "a partial delivery below the low water mark: \(partial.map(\.count))")
        XCTAssertEqual(record.last?.error, 0)
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
    }

    func testAnIntervalDeliversWhatArrivedEvenBelowTheLowWaterMark() {
        let (r, w) = makePipe()
        defer { close(w) }
        let io = TKDispatchIO(type: .stream, fileDescriptor: r, queue: .global()) { _ in close(r) }
        io.setLimit(lowWater: Int.max)
        io.setInterval(interval: .milliseconds(10))
        let partial = DispatchSemaphore(value: 0)
        let got = Guarded<[UInt8]>([])
        io.read(offset: 0, length: Int.max, queue: .global()) { done, data, _ in
            if let data { got.withLock { $0 += Array(data) } }
            if !done && (data?.count ?? 0) > 0 { partial.signal() }
        }
        _ = feed(w, [1, 2, 3], closeAfter: false).wait(timeout: .now() + 30)
        XCTAssertEqual(partial.wait(timeout: .now() + 30), .success, "the interval did not deliver the 3 bytes")
        XCTAssertEqual(got.withLock { $0 }, [1, 2, 3])
        io.close(flags: .stop)
    }

    // MARK: Writing

    func testAWriteLargerThanThePipeWaitsForTheReaderAndLandsWhole() {
        let (r, w) = makePipe()
        let content = pattern(4 * 1_048_576 + 17)
        let (drained, got) = drain(r)
        let cleaned = DispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: .stream, fileDescriptor: w, queue: .global()) { _ in
            close(w)
            cleaned.signal()
        }
        let record = Record()
        io.write(offset: 0, data: TKDispatchData(copying: content), queue: .global(), ioHandler: record.handler)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.last?.error, 0)
        XCTAssertEqual(record.last?.count, 0, "a finished write hands back no remaining data")
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(drained.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(got.withLock { $0 }.count, content.count)
        XCTAssertEqual(got.withLock { $0 }, content)
    }

    func testWritingToASocketWhosePeerLeftReportsEPIPEWithoutKillingTheProcess() {
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair), 0)
        close(pair[1])
        let fd = pair[0]
        let io = TKDispatchIO(type: .stream, fileDescriptor: fd, queue: .global()) { _ in close(fd) }
        let record = Record()
        io.write(offset: 0, data: TKDispatchData(copying: [1, 2, 3]), queue: .global(), ioHandler: record.handler)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.last?.error, EPIPE)
        XCTAssertEqual(record.last?.count, 3, "the bytes not written come back")
        io.close()
    }

    func testABarrierRunsAfterEarlierWritesAndBeforeLaterOnes() {
        let path = temporaryFile([])
        defer { unlink(path) }
        let fd = open(path, O_RDWR)
        let io = TKDispatchIO(type: .random, fileDescriptor: fd, queue: .global()) { _ in close(fd) }
        let sizeAtBarrier = Guarded<Int64>(-1)
        let first = Record()
        let second = Record()
        io.write(offset: 0, data: TKDispatchData(copying: pattern(1_000)), queue: .global(), ioHandler: first.handler)
        io.barrier {
            var st = stat()
            fstat(fd, &st)
            sizeAtBarrier.withLock { $0 = Int64(st.st_size) }
        }
        io.write(offset: 1_000, data: TKDispatchData(copying: pattern(500)), queue: .global(), ioHandler: second.handler)
        XCTAssertTrue(first.wait())
        XCTAssertTrue(second.wait())
        XCTAssertEqual(sizeAtBarrier.withLock { $0 }, 1_000)
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_size, 1_500)
        io.close()
    }

    // MARK: Closing

    func testCloseWithStopCancelsAWaitingReadThenCleansUp() {
        let (r, w) = makePipe()
        defer { close(w) }
        let order = Guarded<[String]>([])
        let cleaned = DispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: .stream, fileDescriptor: r, queue: .global()) { error in
            order.withLock { $0.append("cleanup \(error)") }
            close(r)
            cleaned.signal()
        }
        let record = Record()
        io.read(offset: 0, length: 100, queue: .global()) { done, data, error in
            if done { order.withLock { $0.append("read done \(error)") } }
            record.handler(done, data, error)
        }
        io.close(flags: .stop)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.last?.error, ECANCELED)
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(order.withLock { $0 }, ["read done \(ECANCELED)", "cleanup 0"])
        // After close, operations are refused at once.
        let late = Record()
        io.read(offset: 0, length: 1, queue: .global(), ioHandler: late.handler)
        XCTAssertTrue(late.wait())
        XCTAssertEqual(late.last?.error, ECANCELED)
    }

    func testCloseWithoutStopLetsPendingWorkFinishFirst() {
        let (r, w) = makePipe()
        let cleaned = DispatchSemaphore(value: 0)
        let readDone = Guarded(false)
        let io = TKDispatchIO(type: .stream, fileDescriptor: r, queue: .global()) { _ in
            XCTAssertTrue(readDone.withLock { $0 }, "cleanup before the pending read ended")
            close(r)
            cleaned.signal()
        }
        let record = Record()
        io.read(offset: 0, length: 5, queue: .global()) { done, data, error in
            if done { readDone.withLock { $0 = true } }
            record.handler(done, data, error)
        }
        io.close()
        _ = feed(w, [1, 2, 3, 4, 5])
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.bytes.withLock { $0 }, [1, 2, 3, 4, 5])
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
    }

    func testTheDescriptorsFlagsAreRestoredAtCleanup() {
        let (r, w) = makePipe()
        defer {
            close(r)
            close(w)
        }
        let before = fcntl(r, F_GETFL)
        let cleaned = DispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: .stream, fileDescriptor: r, queue: .global()) { _ in cleaned.signal() }
        let record = Record()
        io.read(offset: 0, length: 1, queue: .global(), ioHandler: record.handler)
        _ = feed(w, [7], closeAfter: false)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(io.fileDescriptor, r)
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(fcntl(r, F_GETFL), before)
        XCTAssertEqual(io.fileDescriptor, -1)
    }

    // MARK: Path channels

    func testAPathChannelWritesThenReadsBackAndClosesItsDescriptor() throws {
        let path = NSTemporaryDirectory() + "tk-io-path-\(UUID().uuidString)"
        defer { unlink(path) }
        let cleaned = DispatchSemaphore(value: 0)
        let io = try TKDispatchIO(type: .random, path: path, oflag: O_RDWR | O_CREAT, mode: 0o600, queue: .global()) { error in
            XCTAssertEqual(error, 0)
            cleaned.signal()
        }
        let wrote = Record()
        let readBack = Record()
        let content = pattern(3_000)
        io.write(offset: 0, data: TKDispatchData(copying: content), queue: .global(), ioHandler: wrote.handler)
        io.barrier {} // reads and writes run side by side; the barrier orders the read after the write
        io.read(offset: 0, length: 3_000, queue: .global(), ioHandler: readBack.handler)
        XCTAssertTrue(wrote.wait())
        XCTAssertTrue(readBack.wait())
        XCTAssertEqual(readBack.bytes.withLock { $0 }, content)
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), Data(content))
    }

    func testAPathThatCannotBeOpenedFailsItsOperationsAndTheCleanup() throws {
        let cleaned = DispatchSemaphore(value: 0)
        let cleanupError = Guarded<Int32>(-1)
        let io = try TKDispatchIO(type: .stream, path: "/nonexistent/tk-io", oflag: O_RDONLY, mode: 0, queue: .global()) { error in
            cleanupError.withLock { $0 = error }
            cleaned.signal()
        }
        let record = Record()
        io.read(offset: 0, length: 10, queue: .global(), ioHandler: record.handler)
        XCTAssertTrue(record.wait())
        XCTAssertEqual(record.last?.error, ENOENT)
        io.close()
        XCTAssertEqual(cleaned.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(cleanupError.withLock { $0 }, ENOENT)
        XCTAssertThrowsError(try TKDispatchIO(type: .stream, path: "relative", oflag: O_RDONLY, mode: 0, queue: .global()) { _ in })
    }

    // MARK: One-shot read and write

    func testOneShotReadCollectsAPipeToItsEnd() {
        let (r, w) = makePipe()
        let content = pattern(200_000)
        let fed = feed(w, content, pieces: 10)
        let done = DispatchSemaphore(value: 0)
        let got = Guarded<(bytes: [UInt8], error: Int32, calls: Int)>(([], -1, 0))
        TKDispatchIO.read(fromFileDescriptor: r, maxLength: Int.max, runningHandlerOn: .global()) { data, error in
            got.withLock { $0 = (Array(data), error, $0.calls + 1) }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(fed.wait(timeout: .now() + 30), .success)
        let result = got.withLock { $0 }
        XCTAssertEqual(result.bytes, content)
        XCTAssertEqual(result.error, 0)
        XCTAssertEqual(result.calls, 1)
        close(r)
    }

    func testOneShotReadStopsAtMaxLengthAndOneShotWriteWritesAll() {
        let path = temporaryFile([])
        defer { unlink(path) }
        let fd = open(path, O_RDWR)
        defer { close(fd) }
        let wrote = DispatchSemaphore(value: 0)
        let writeResult = Guarded<(Int, Int32)>((-1, -1))
        TKDispatchIO.write(toFileDescriptor: fd, data: TKDispatchData(copying: pattern(10_000)), runningHandlerOn: .global()) {
            rest, error in
            writeResult.withLock { $0 = (rest?.count ?? 0, error) }
            wrote.signal()
        }
        XCTAssertEqual(wrote.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(writeResult.withLock { $0 == (0, 0) })
        XCTAssertEqual(lseek(fd, 0, SEEK_SET), 0)
        let read = DispatchSemaphore(value: 0)
        let got = Guarded<[UInt8]>([])
        TKDispatchIO.read(fromFileDescriptor: fd, maxLength: 4_000, runningHandlerOn: .global()) { data, _ in
            got.withLock { $0 = Array(data) }
            read.signal()
        }
        XCTAssertEqual(read.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(got.withLock { $0 }, Array(pattern(10_000)[0..<4_000]))
    }
}
