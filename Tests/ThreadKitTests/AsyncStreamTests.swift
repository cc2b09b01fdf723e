// AsyncStreamTests: streams in async/await (docs/RunLoopIO.md, "Streams"): `TKInputStream.chunks`
// and `TKOutputStream.write(_:)` on streams scheduled on a loop, with tasks preferring that loop.
// Exact bytes both ways (2 MB echoed over TCP; 2 MB through a bound pair between two loops; a
// memory stream), the seeds' resident network thread as an async function serving three requests
// with every resume on its loop's thread, cancellation mid-read and mid-write leaving no waiter
// (and no descriptor once the owner closes the stream; nothing lost before that), a peer's reset
// and a close ending the wait with an error, and the refusals (no loop, a delegate of its own, two
// writers). Judges: byte comparison, pthread ids, /proc/self/fd, plain POSIX peers.
import Foundation
import Glibc
import XCTest

@testable import ThreadKit

final class AsyncStreamTests: XCTestCase {
    // MARK: Exact bytes

    func testAMemoryStreamsChunksAreItsBytesThenTheEnd() async throws {
        let data = pattern(100_003, seed: 1)
        let input = TKInputStream(data: data)
        var chunks = input.chunks(maxLength: 4_096).makeAsyncIterator()
        var got: [UInt8] = []
        while let chunk = try await chunks.next() {
            XCTAssertTrue((1...4_096).contains(chunk.count), "a chunk of \(chunk.count) bytes")
            got += chunk
        }
        XCTAssertTrue(got == data, "\(got.count) bytes, not the \(data.count) given")
        XCTAssertEqual(input.streamStatus, .atEnd)
        let again = try await chunks.next()
        XCTAssertNil(again, "after the end")
    }

    func testTwoMegabytesEchoedOverTCPAreExactBothWaysWithEveryResumeOnTheLoop() async throws {
        let server = LoopbackServer(.echo)
        defer { server.stop() }
        let worker = IOLoopThread(name: "async-echo", passDeadline: nil)
        defer { worker.stop() }
        let notes = ThreadNotes(thread: worker.pthread)
        let payload = pattern(stress(2_000_000) + 5, seed: 2)
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        input.schedule(in: worker.loop, forMode: .default)
        output.schedule(in: worker.loop, forMode: .default)
        defer {
            input.close()
            output.close()
        }
        let received = try await withTaskExecutorPreference(worker.loop) { () async throws -> [UInt8] in
            try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
                group.addTask {
                    try await output.write(payload)
                    notes.note("write")
                    return nil
                }
                group.addTask {
                    var got: [UInt8] = []
                    got.reserveCapacity(payload.count)
                    for try await chunk in input.chunks() {
                        notes.note("chunk")
                        got += chunk
                        if got.count >= payload.count { break }
                    }
                    return got
                }
                var received: [UInt8] = []
                for try await result in group { if let result { received = result } }
                return received
            }
        }
        XCTAssertEqual(received.count, payload.count)
        XCTAssertTrue(received == payload, "the echoed bytes differ from those written")
        XCTAssertGreaterThan(notes.count, 2)
        XCTAssertEqual(notes.off, [], "resumed off the loop's thread")
    }

    func testTwoMegabytesThroughABoundPairBetweenTwoLoopsAreExact() async throws {
        let writerLoop = IOLoopThread(name: "async-writer", passDeadline: nil)
        let readerLoop = IOLoopThread(name: "async-reader", passDeadline: nil)
        defer {
            writerLoop.stop()
            readerLoop.stop()
        }
        let writerNotes = ThreadNotes(thread: writerLoop.pthread)
        let readerNotes = ThreadNotes(thread: readerLoop.pthread)
        let payload = pattern(stress(2_000_000) + 3, seed: 3)
        let (input, output) = TKStream.getBoundStreams(withBufferSize: 16_384)
        output.schedule(in: writerLoop.loop, forMode: .default)
        input.schedule(in: readerLoop.loop, forMode: .default)
        let writer = Task(executorPreference: writerLoop.loop) {
            // Uneven pieces: each write suspends while the 16 KiB buffer is full.
            var offset = 0
            var piece = 1
            while offset < payload.count {
                let end = min(payload.count, offset + piece * 7_919)
                try await output.write(Array(payload[offset..<end]))
                writerNotes.note("write")
                offset = end
                piece = piece % 40 + 1
            }
            output.close()
        }
        let reader = Task(executorPreference: readerLoop.loop) { () -> [UInt8] in
            var got: [UInt8] = []
            for try await chunk in input.chunks(maxLength: 5_000) {
                readerNotes.note("chunk")
                got += chunk
            }
            return got
        }
        assertSucceeded(await outcome(of: writer, within: .seconds(120)), "the writer")
        let read = await outcome(of: reader, within: .seconds(120))
        assertSucceeded(read, "the reader")
        if case .success(let got)? = read {
            XCTAssertEqual(got.count, payload.count)
            XCTAssertTrue(got == payload, "the bytes read differ from those written")
        }
        XCTAssertEqual(writerNotes.off, [], "the writer resumed off its loop's thread")
        XCTAssertEqual(readerNotes.off, [], "the reader resumed off its loop's thread")
        XCTAssertEqual(input.streamStatus, .atEnd)
        input.close()
    }

    // MARK: The resident network thread

    /// One HTTP request on streams scheduled on `loop`, as straight-line async code; notes every
    /// point where the task resumes.
    private static func fetch(port: UInt16, path: String, loop: TKRunLoop, notes: ThreadNotes) async throws -> String {
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(port))
        input.schedule(in: loop, forMode: .default)
        output.schedule(in: loop, forMode: .default)
        defer {
            input.close()
            output.close()
        }
        notes.note("\(path): start")
        try await output.write(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        notes.note("\(path): written")
        var answer: [UInt8] = []
        for try await chunk in input.chunks(maxLength: 8_192) {
            notes.note("\(path): chunk")
            answer += chunk
        }
        notes.note("\(path): end")
        return String(decoding: answer, as: UTF8.self)
    }

    func testTheResidentNetworkThreadServesThreeRequestsAsAnAsyncFunctionOnItsOwnThread() async throws {
        let body = String(repeating: "resident network thread; ", count: 4_000)
        let server = LoopbackServer(.http(body: body))
        defer { server.stop() }
        let network = IOLoopThread(name: "network", passDeadline: nil)
        defer { network.stop() }
        let notes = ThreadNotes(thread: network.pthread)
        let port = server.port
        let answers = try await withTaskExecutorPreference(network.loop) { () async throws -> [String] in
            try await withThrowingTaskGroup(of: String.self) { group in
                for i in 1...3 {
                    group.addTask { try await Self.fetch(port: port, path: "/request/\(i)", loop: network.loop, notes: notes) }
                }
                var answers: [String] = []
                for try await answer in group { answers.append(answer) }
                return answers
            }
        }
        XCTAssertEqual(answers.count, 3)
        for answer in answers {
            XCTAssertTrue(answer.hasPrefix("HTTP/1.1 200 OK\r\n"), String(answer.prefix(80)))
            XCTAssertTrue(answer.hasSuffix("\r\n\r\n" + body), "a body was not received whole")
        }
        XCTAssertGreaterThanOrEqual(notes.count, 3 * 4)
        XCTAssertEqual(notes.off, [], "the handler ran off the network thread")
    }

    // MARK: Errors

    func testAPeerResetEndsTheSequenceWithTheResetError() async throws {
        let server = LoopbackServer(.reset)
        defer { server.stop() }
        let worker = IOLoopThread(name: "async-reset", passDeadline: nil)
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        input.schedule(in: worker.loop, forMode: .default)
        defer {
            input.close()
            output.close()
        }
        let reader = Task(executorPreference: worker.loop) { () -> Int in
            var count = 0
            for try await chunk in input.chunks() { count += chunk.count }
            return count
        }
        switch await outcome(of: reader) {
        case nil: XCTFail("the sequence did not end")
        case .success(let count)?: XCTFail("the sequence ended normally after \(count) bytes")
        case .failure(let error)?:
            XCTAssertEqual((error as? TKError)?.errno, ECONNRESET, "\(error)")
            XCTAssertEqual(input.streamStatus, .error)
        }
    }

    func testClosingAStreamWhileATaskAwaitsItEndsTheWaitWithAnError() async throws {
        let worker = IOLoopThread(name: "async-close", passDeadline: nil)
        defer { worker.stop() }
        let (ours, peer) = IOTestFD.socketPair()
        defer { close(peer) }
        let (input, output) = TKStream.getStreams(forConnectedSocket: ours)
        input.schedule(in: worker.loop, forMode: .default)
        let reader = Task(executorPreference: worker.loop) { () -> Int in
            var count = 0
            for try await chunk in input.chunks() { count += chunk.count }
            return count
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { Self.relay(of: input)?.waiters.count == 1 }, "the reader never waited")
        input.close()
        output.close()
        switch await outcome(of: reader) {
        case nil: XCTFail("the reader still waits after the close")
        case .success(let count)?: XCTFail("the sequence ended normally after \(count) bytes")
        case .failure(let error)?:
            XCTAssertEqual((error as? TKError)?.code, .invalidArgument, "\(error)")
            XCTAssertTrue("\(error)".contains("the stream is closed"), "\(error)")
        }
    }

    // MARK: Cancellation

    /// The async calls' delegate of `stream` (the relay), while one is in progress.
    private static func relay(of stream: TKStream) -> StreamEventRelay? { stream.delegate as? StreamEventRelay }

    func testCancellingAWaitingReadLeavesNoWaiterLosesNoByteAndNoDescriptorOnceClosed() async throws {
        let worker = IOLoopThread(name: "async-cancel-read", passDeadline: nil)
        defer { worker.stop() }
        let (ours, peer) = IOTestFD.socketPair()
        // The stream's own socket, by kernel object: other tests' threads may open and close
        // descriptors meanwhile, so a process-wide count would judge them, not this stream.
        let socketObject = try XCTUnwrap(Self.kernelObject(of: ours))
        weak var weakInput: TKInputStream?
        do {
            let (input, output) = TKStream.getStreams(forConnectedSocket: ours)
            weakInput = input
            input.schedule(in: worker.loop, forMode: .default)
            XCTAssertEqual(write(peer, pattern(10, seed: 4), 10), 10)
            let first = Guarded<[UInt8]?>(nil)
            let reader = Task(executorPreference: worker.loop) { () -> [UInt8]? in
                var chunks = input.chunks(maxLength: 64).makeAsyncIterator()
                let chunk = try await chunks.next()
                first.withLock { $0 = chunk }
                return try await chunks.next() // nothing more comes: it waits
            }
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) { first.withLock { $0 } != nil && Self.relay(of: input)?.waiters.count == 1 },
                "the reader never waited for its second chunk")
            let relay = try XCTUnwrap(Self.relay(of: input))
            reader.cancel()
            assertCancelled(await outcome(of: reader), "the cancelled read")
            XCTAssertEqual(first.withLock { $0 }, pattern(10, seed: 4))
            XCTAssertEqual(relay.waiters.count, 0, "a waiter was left behind")
            XCTAssertEqual(input.streamStatus, .open, "cancellation leaves the stream to its owner")
            // Nothing read after the cancellation is lost: a new iteration gets the next bytes whole.
            XCTAssertEqual(write(peer, pattern(20, seed: 5), 20), 20)
            let rest = Task(executorPreference: worker.loop) { () -> [UInt8] in
                var got: [UInt8] = []
                for try await chunk in input.chunks() {
                    got += chunk
                    if got.count >= 20 { break }
                }
                return got
            }
            let read = await outcome(of: rest)
            assertSucceeded(read, "the read after the cancellation")
            if case .success(let got)? = read { XCTAssertEqual(got, pattern(20, seed: 5)) }
            XCTAssertEqual(relay.waiters.count, 0)
            input.close()
            output.close()
        }
        close(peer)
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { !Self.isOpen(socketObject) }, "the stream's socket \(socketObject) was left open")
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { weakInput == nil }, "the closed stream is still held")
    }

    /// What `fd` names in the kernel ("socket:[12345]"), read from /proc/self/fd.
    private static func kernelObject(of fd: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }

    /// Whether any descriptor of the process still names `object` (a socket's inode is its own
    /// while any descriptor holds it open).
    private static func isOpen(_ object: String) -> Bool {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.contains { Int32($0).flatMap(kernelObject(of:)) == object }
    }

    func testCancellingAWriteStalledByAPeerLeavesNoWaiterAndASecondWriterIsRefused() async throws {
        let server = LoopbackServer(.silent)
        defer { server.stop() }
        let worker = IOLoopThread(name: "async-cancel-write", passDeadline: nil)
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        output.schedule(in: worker.loop, forMode: .default)
        // More than the kernel's send and receive buffers hold: the write must wait for room.
        let big = [UInt8](repeating: 7, count: 64 << 20)
        let writer = Task(executorPreference: worker.loop) { try await output.write(big) }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) { Self.relay(of: output)?.waiters.count == 1 }, "the write never waited for room")
        let relay = try XCTUnwrap(Self.relay(of: output))
        // A second writer meanwhile is refused before it writes a byte.
        let second = Task(executorPreference: worker.loop) { try await output.write([1, 2, 3]) }
        switch await outcome(of: second) {
        case .failure(let error as TKError)?: XCTAssertTrue(error.message.contains("another task is already writing"), "\(error)")
        default: XCTFail("a second concurrent writer was not refused")
        }
        writer.cancel()
        assertCancelled(await outcome(of: writer), "the cancelled write")
        XCTAssertEqual(relay.waiters.count, 0, "a waiter was left behind")
        XCTAssertEqual(output.streamStatus, .open, "cancellation leaves the stream to its owner")
        output.close()
        input.close()
        // Judged by our socket only (connected to this server's port), not a process-wide count
        // that other tests' threads change meanwhile.
        XCTAssertTrue(
            waitUntil(.now + .seconds(10)) { Self.socketsConnected(toPort: server.port) == 0 },
            "our socket is still open: \(Self.socketsConnected(toPort: server.port)) connected to port \(server.port)")
    }

    /// The process's descriptors of IPv4 sockets whose peer is 127.0.0.1:`port`.
    private static func socketsConnected(toPort port: UInt16) -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.compactMap { Int32($0) }.filter { fd in
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let ok = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) == 0 }
            }
            return ok && address.sin_family == sa_family_t(AF_INET) && UInt16(bigEndian: address.sin_port) == port
        }.count
    }

    func testACancelledTaskReadsAndWritesNothing() async throws {
        let (input, output) = TKStream.getBoundStreams(withBufferSize: 64)
        input.open()
        output.open()
        XCTAssertEqual(output.write([9, 9], maxLength: 2), 2)
        let outcomes = await Task { () -> (read: Bool, wrote: Bool) in
            cancelCurrentTask()
            var chunks = input.chunks().makeAsyncIterator()
            let read = (try? await chunks.next()) != nil
            let wrote = (try? await output.write([1])) != nil
            return (read, wrote)
        }.value
        XCTAssertFalse(outcomes.read, "a cancelled task read")
        XCTAssertFalse(outcomes.wrote, "a cancelled task wrote")
        var buffer = [UInt8](repeating: 0, count: 8)
        XCTAssertEqual(input.read(&buffer, maxLength: 8), 2, "the two bytes written before are still there, and only they")
        input.close()
        output.close()
    }

    // MARK: Refusals

    func testAStreamInNoRunLoopThatMustWaitIsRefusedInsteadOfWaitingForever() async throws {
        let (ours, peer) = IOTestFD.socketPair()
        defer { close(peer) }
        let (input, output) = TKStream.getStreams(forConnectedSocket: ours)
        defer {
            input.close()
            output.close()
        }
        do {
            for try await _ in input.chunks() { XCTFail("nothing was written") }
            XCTFail("the sequence ended instead of refusing")
        } catch let error as TKError {
            XCTAssertEqual(error.code, .invalidArgument)
            XCTAssertTrue(error.message.contains("not scheduled on a run loop"), error.message)
            XCTAssertTrue(error.message.contains("Fix: schedule(in:forMode:)"), error.message)
        }
    }

    func testAStreamWithADelegateOfItsOwnIsRefused() async throws {
        let input = TKInputStream(data: [1, 2, 3])
        let handler = StreamHandler { _, _ in }
        input.delegate = handler
        do {
            for try await _ in input.chunks() { XCTFail("read through another's delegate") }
            XCTFail("not refused")
        } catch let error as TKError {
            XCTAssertTrue(error.message.contains("has a delegate of its own (StreamHandler)"), error.message)
        }
        XCTAssertTrue(input.delegate === handler, "the stream's own delegate was replaced")
        XCTAssertEqual(input.streamStatus, .notOpen, "the refused call opened the stream")
    }
}
