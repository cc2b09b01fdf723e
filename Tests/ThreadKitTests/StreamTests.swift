// StreamTests: TKInputStream / TKOutputStream (NSStream) over memory, files, bound pairs and TCP:
// blocking use, events on the scheduled loop's thread in order, the end of scheduled memory
// streams, exact bytes both ways (an echo server with 100 clients on one loop thread, 10^6+ bytes
// in bulk), back-pressure, resets, refused connections, unknown names, and many half-open
// connections without busy loops or leaked descriptors. Peers are plain POSIX (LoopbackServer,
// a child process) or judged by exact byte comparison.
import Foundation
import Glibc
import ThreadKit
import XCTest

final class StreamTests: XCTestCase {
    // MARK: Memory and files

    func testMemoryInputReadsBlockingToTheEnd() {
        let data = pattern(1_000)
        let stream = TKInputStream(data: data)
        var buffer = [UInt8](repeating: 0, count: 64)
        XCTAssertEqual(stream.read(&buffer, maxLength: 64), -1, "not open yet")
        stream.open()
        XCTAssertEqual(stream.streamStatus, .open)
        var got: [UInt8] = []
        while true {
            let n = stream.read(&buffer, maxLength: 64)
            if n <= 0 {
                XCTAssertEqual(n, 0)
                break
            }
            got += buffer[0..<n]
        }
        XCTAssertEqual(got, data)
        XCTAssertEqual(stream.streamStatus, .atEnd)
        XCTAssertFalse(stream.hasBytesAvailable)
        XCTAssertEqual(stream.read(&buffer, maxLength: 64), 0)
        stream.close()
        XCTAssertEqual(stream.streamStatus, .closed)
        XCTAssertEqual(stream.read(&buffer, maxLength: 64), -1, "reading a closed stream is an error, not a crash")
    }

    /// A scheduled memory stream delivers every byte, then endEncountered, whether the delegate
    /// reads a little at a time or everything at once (the last bytes and the end are not lost).
    func testScheduledMemoryInputDeliversEveryByteThenTheEnd() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        for chunk in [7, 1_000, 4_096] {
            let data = pattern(1_000, seed: chunk)
            let stream = TKInputStream(data: data)
            let events = Recorder<TKStream.Event>()
            let got = Guarded<[UInt8]>([])
            let handler = StreamHandler { s, event in
                XCTAssertTrue(worker.isCurrent)
                events.append(event)
                if event == .hasBytesAvailable {
                    var buffer = [UInt8](repeating: 0, count: chunk)
                    let n = (s as! TKInputStream).read(&buffer, maxLength: chunk)
                    if n > 0 { got.withLock { $0 += buffer[0..<n] } }
                }
            }
            stream.delegate = handler
            stream.schedule(in: worker.loop, forMode: .default)
            stream.open()
            XCTAssertTrue(events.wait { $0.last == .endEncountered }, "chunk \(chunk): \(events.values)")
            XCTAssertEqual(got.withLock { $0 }, data, "chunk \(chunk)")
            XCTAssertEqual(events.values.first, .openCompleted)
            XCTAssertEqual(events.values.filter { $0 == .endEncountered }.count, 1)
            XCTAssertEqual(events.values.filter { $0 == .hasBytesAvailable }.count, (1_000 + chunk - 1) / chunk)
            XCTAssertEqual(stream.streamStatus, .atEnd)
            stream.close()
        }
    }

    func testEmptyScheduledMemoryInputEndsAtOnce() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let stream = TKInputStream(data: [])
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { _, event in events.append(event) }
        stream.delegate = handler
        stream.schedule(in: worker.loop, forMode: .default)
        stream.open()
        XCTAssertTrue(events.wait { $0 == [.openCompleted, .endEncountered] }, "\(events.values)")
        stream.close()
    }

    func testMemoryOutputCollectsWritesAndOffersSpaceOncePerWrite() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let stream = TKOutputStream(toMemory: ())
        let data = pattern(10_000)
        let offset = Guarded(0)
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { s, event in
            events.append(event)
            guard event == .hasSpaceAvailable else { return }
            let start = offset.withLock { $0 }
            guard start < data.count else { return } // nothing to write: no further events
            let n = data[start...].prefix(999).withUnsafeBufferPointer {
                (s as! TKOutputStream).write($0.baseAddress!, maxLength: $0.count)
            }
            offset.withLock { $0 += n }
        }
        stream.delegate = handler
        stream.schedule(in: worker.loop, forMode: .default)
        stream.open()
        XCTAssertTrue(waitUntil(.now + .seconds(20)) { offset.withLock { $0 } == data.count })
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(stream.dataWrittenToMemory, data)
        XCTAssertEqual(events.values.filter { $0 == .hasSpaceAvailable }.count, 12, "one per write (11), plus the first")
        XCTAssertNil(TKOutputStream(toFileAtPath: "/no/such/dir/x", append: false)?.dataWrittenToMemory)
        stream.close()
    }

    func testFileStreamsRoundTripScheduled() throws {
        let path = NSTemporaryDirectory() + "tk-stream-\(getpid())"
        defer { unlink(path) }
        let data = pattern(300_000)
        let output = try XCTUnwrap(TKOutputStream(toFileAtPath: path, append: false))
        output.open()
        var offset = 0
        while offset < data.count {
            let n = data[offset...].prefix(65_536).withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            XCTAssertGreaterThan(n, 0)
            offset += n
        }
        output.close()
        let appended = try XCTUnwrap(TKOutputStream(toFileAtPath: path, append: true))
        appended.open()
        XCTAssertEqual(appended.write([9, 9], maxLength: 2), 2)
        appended.close()
        XCTAssertNil(TKInputStream(fileAtPath: "/no/such/file"))
        let worker = IOLoopThread()
        defer { worker.stop() }
        let input = try XCTUnwrap(TKInputStream(fileAtPath: path))
        let got = Guarded<[UInt8]>([])
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { s, event in
            events.append(event)
            if event == .hasBytesAvailable {
                var buffer = [UInt8](repeating: 0, count: 10_000)
                let n = (s as! TKInputStream).read(&buffer, maxLength: buffer.count)
                if n > 0 { got.withLock { $0 += buffer[0..<n] } }
            }
        }
        input.delegate = handler
        input.schedule(in: worker.loop, forMode: .default)
        input.open()
        XCTAssertTrue(events.wait { $0.last == .endEncountered })
        XCTAssertEqual(got.withLock { $0 }, data + [9, 9])
        input.close()
    }

    // MARK: Bound pairs

    func testBoundPairBlockingTransfersExactly() {
        let (input, output) = TKStream.getBoundStreams(withBufferSize: 4_096)
        let data = pattern(stress(1_000_000) + 17)
        input.open()
        output.open()
        let writer = Workers.start {
            var offset = 0
            while offset < data.count {
                let n = data[offset...].prefix(10_000).withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
                XCTAssertGreaterThan(n, 0)
                if n <= 0 { break }
                offset += n
            }
            output.close()
        }
        var got: [UInt8] = []
        got.reserveCapacity(data.count)
        var buffer = [UInt8](repeating: 0, count: 8_192)
        while true {
            let n = input.read(&buffer, maxLength: buffer.count)
            if n <= 0 {
                XCTAssertEqual(n, 0)
                break
            }
            got += buffer[0..<n]
        }
        XCTAssertEqual(writer.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(got.count, data.count)
        XCTAssertTrue(got == data)
        XCTAssertEqual(input.streamStatus, .atEnd)
        input.close()
        // Writing after the reader closed fails with an error, not a crash.
        let (i2, o2) = TKStream.getBoundStreams(withBufferSize: 16)
        i2.open()
        o2.open()
        i2.close()
        XCTAssertEqual(o2.write([1], maxLength: 1), -1)
        XCTAssertEqual(o2.streamStatus, .error)
        XCTAssertEqual(o2.streamError?.errno, EPIPE)
    }

    func testBoundPairEndsScheduledOnTwoLoops() {
        let readerLoop = IOLoopThread(name: "reader")
        let writerLoop = IOLoopThread(name: "writer")
        defer {
            readerLoop.stop()
            writerLoop.stop()
        }
        let (input, output) = TKStream.getBoundStreams(withBufferSize: 1_000)
        let data = pattern(stress(1_000_000) + 3)
        let offset = Guarded(0)
        let got = Guarded<[UInt8]>([])
        let ended = Recorder<Bool>()
        let writeHandler = StreamHandler { _, event in
            XCTAssertTrue(writerLoop.isCurrent)
            guard event == .hasSpaceAvailable else { return }
            let start = offset.withLock { $0 }
            guard start < data.count else { return }
            let n = data[start...].prefix(4_096).withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            offset.withLock { $0 += n }
            if start + n == data.count { output.close() }
        }
        let readHandler = StreamHandler { _, event in
            XCTAssertTrue(readerLoop.isCurrent)
            if event == .hasBytesAvailable {
                var buffer = [UInt8](repeating: 0, count: 3_000)
                let n = input.read(&buffer, maxLength: buffer.count)
                if n > 0 { got.withLock { $0 += buffer[0..<n] } }
            }
            if event == .endEncountered { ended.append(true) }
        }
        input.delegate = readHandler
        output.delegate = writeHandler
        input.schedule(in: readerLoop.loop, forMode: .default)
        output.schedule(in: writerLoop.loop, forMode: .common)
        input.open()
        output.open()
        XCTAssertTrue(ended.wait(seconds: 60) { $0.count == 1 })
        XCTAssertTrue(got.withLock { $0 } == data)
        input.close()
    }

    // MARK: Sockets

    func testBlockingSocketStreamsTalkHTTP() {
        let server = LoopbackServer(.http(body: "hello from the server"))
        defer { server.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        input.open()
        output.open()
        let request = Array("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        XCTAssertEqual(output.write(request, maxLength: request.count), request.count, "waits for the connection, then writes")
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 7)
        while true {
            let n = input.read(&buffer, maxLength: buffer.count)
            if n <= 0 {
                XCTAssertEqual(n, 0)
                break
            }
            answer += buffer[0..<n]
        }
        XCTAssertTrue(String(decoding: answer, as: UTF8.self).hasSuffix("\r\n\r\nhello from the server"))
        XCTAssertEqual(input.streamStatus, .atEnd)
        XCTAssertEqual(input.read(&buffer, maxLength: 7), 0, "reading after the end: 0, no crash")
        input.close()
        output.close()
    }

    func testBulkEchoIsExactBothWays() {
        let server = LoopbackServer(.echo)
        defer { server.stop() }
        let worker = IOLoopThread()
        defer { worker.stop() }
        let client = EchoClient(host: "localhost", port: server.port, payload: pattern(stress(2_000_000) + 5), chunk: 65_536)
        client.start(on: worker.loop)
        XCTAssertTrue(client.finished.wait(seconds: 60) { !$0.isEmpty }, "echo did not finish")
        XCTAssertEqual(client.finished.values.first, "ok")
        XCTAssertEqual(client.firstEvent.withLock { $0 }, .openCompleted)
    }

    func testEchoServerWithAHundredClientsOnOneLoopThread() throws {
        let serverLoop = IOLoopThread(name: "server")
        let clientLoop = IOLoopThread(name: "clients")
        defer {
            serverLoop.stop()
            clientLoop.stop()
        }
        let baseline = ProcessProbe.openDescriptors
        let connections = Guarded<[EchoConnection]>([])
        let listener = try TKSocketListener(backlog: 1024) { fd in
            XCTAssertTrue(serverLoop.isCurrent)
            let connection = EchoConnection(fd: fd, loop: TKRunLoop.current)
            connections.withLock { $0.append(connection) }
        }
        listener.schedule(in: serverLoop.loop, forMode: .default)
        let clients = (0..<100).map { i in
            EchoClient(host: "127.0.0.1", port: listener.port, payload: pattern(stress(20_000) + i, seed: i), chunk: 1_500)
        }
        for client in clients { client.start(on: clientLoop.loop) }
        for (i, client) in clients.enumerated() {
            XCTAssertTrue(client.finished.wait(seconds: 60) { !$0.isEmpty }, "client \(i) did not finish")
            XCTAssertEqual(client.finished.values.first, "ok", "client \(i)")
            XCTAssertTrue(client.onLoopThread.withLock { $0 }, "client \(i) events off its loop thread")
        }
        XCTAssertTrue(
            waitUntil(.now + .seconds(20)) {
                connections.withLock { $0.allSatisfy { $0.isClosed } } && connections.withLock { $0.count } == 100
            })
        listener.invalidate()
        XCTAssertLessThanOrEqual(ProcessProbe.descriptors(settlingAtMost: baseline), baseline, "descriptors leaked")
    }

    func testConnectionRefusedIsAnErrorEvent() throws {
        let closedPort: UInt16 = try {
            let listener = try TKSocketListener { fd in close(fd) }
            defer { listener.invalidate() }
            return listener.port
        }()
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(closedPort))
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { _, event in events.append(event) }
        input.delegate = handler
        input.schedule(in: worker.loop, forMode: .default)
        input.open()
        XCTAssertTrue(events.wait { $0 == [.errorOccurred] }, "\(events.values)")
        XCTAssertEqual(input.streamStatus, .error)
        XCTAssertEqual(input.streamError?.errno, ECONNREFUSED)
        // The unscheduled output stream fails at once too.
        output.open()
        var byte: UInt8 = 1
        XCTAssertEqual(output.write(&byte, maxLength: 1), -1)
        XCTAssertEqual(output.streamError?.errno, ECONNREFUSED)
        input.close()
        output.close()
    }

    func testUnknownNameIsAnErrorEvent() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "no-such-host.invalid", port: 80)
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { _, event in events.append(event) }
        output.delegate = handler
        output.schedule(in: worker.loop, forMode: .default)
        output.open()
        XCTAssertTrue(events.wait { $0 == [.errorOccurred] }, "\(events.values)")
        XCTAssertEqual(output.streamError?.code, .invalidArgument)
        XCTAssertTrue(output.streamError?.message.contains("no-such-host.invalid") ?? false)
        let (badInput, _) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: 70_000)
        badInput.open()
        XCTAssertEqual(badInput.streamStatus, .error)
        input.close()
        output.close()
    }

    func testPeerResetIsAnErrorEventOnTheLoopThread() {
        let server = LoopbackServer(.reset)
        defer { server.stop() }
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        let events = Recorder<TKStream.Event>()
        let handler = StreamHandler { s, event in
            XCTAssertTrue(worker.isCurrent)
            events.append(event)
            if event == .hasBytesAvailable {
                var buffer = [UInt8](repeating: 0, count: 16)
                _ = (s as! TKInputStream).read(&buffer, maxLength: 16)
            }
        }
        input.delegate = handler
        input.schedule(in: worker.loop, forMode: .default)
        input.open()
        XCTAssertTrue(events.wait { $0.contains(.errorOccurred) || $0.contains(.endEncountered) }, "\(events.values)")
        // The reset may beat the connect's completion check (then there is no openCompleted).
        XCTAssertEqual(events.values.last, .errorOccurred, "\(events.values)")
        XCTAssertFalse(events.values.contains(.endEncountered))
        XCTAssertEqual(input.streamError?.errno, ECONNRESET)
        input.close()
        output.close()
    }

    func testAPeerThatStopsReadingStallsWritesWithoutSpinning() {
        let server = LoopbackServer(.silent)
        defer { server.stop() }
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        let total = 64 << 20 // more than the kernel's send and receive buffers hold
        let chunk = [UInt8](repeating: 5, count: 65_536)
        let written = Guarded(0)
        let spaceEvents = JudgedCounter()
        let handler = StreamHandler { _, event in
            guard event == .hasSpaceAvailable else { return }
            spaceEvents.add()
            let done = written.withLock { $0 }
            guard done < total else { return }
            let n = output.write(chunk, maxLength: min(chunk.count, total - done))
            if n > 0 { written.withLock { $0 += n } }
        }
        output.delegate = handler
        output.schedule(in: worker.loop, forMode: .default)
        output.open()
        // The kernel's buffers fill, and hasSpaceAvailable stops coming: the count stays the same
        // over several passes of the loop.
        XCTAssertTrue(waitUntil(.now + .seconds(20)) { written.withLock { $0 } > 0 })
        var stalled = spaceEvents.count
        var stablePasses = 0
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) {
                worker.sync {}
                stablePasses = spaceEvents.count == stalled ? stablePasses + 1 : 0
                stalled = spaceEvents.count
                return stablePasses >= 5
            })
        XCTAssertLessThan(written.withLock { $0 }, total)
        let cpuBefore = ProcessProbe.cpuTime
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .milliseconds(300) { usleep(20_000) }
        XCTAssertLessThan(ProcessProbe.cpuTime - cpuBefore, .milliseconds(100), "a stalled writer must not spin")
        // The peer reads again: hasSpaceAvailable resumes and everything arrives.
        server.drain()
        XCTAssertTrue(waitUntil(.now + .seconds(60)) { written.withLock { $0 } == total })
        output.close()
        input.close()
        XCTAssertTrue(waitUntil(.now + .seconds(20)) { server.drained.count == total })
    }

    func testManyHalfOpenConnectionsEndWithoutBusyLoopsOrLeaks() throws {
        let count = stress(10_000)
        let half = count / 2
        let worker = IOLoopThread(name: "server")
        defer { worker.stop() }
        // Foundation's Process keeps a loopback connection of its own from its first use on.
        let warmUp = try Process.run(URL(fileURLWithPath: "/bin/true"), arguments: [])
        warmUp.waitUntilExit()
        let baseline = ProcessProbe.openSockets
        let ends = JudgedCounter()
        let open = Guarded<[ObjectIdentifier: TKInputStream]>([:])
        let handler = StreamHandler { s, event in
            switch event {
            case .hasBytesAvailable:
                var buffer = [UInt8](repeating: 0, count: 64)
                _ = (s as! TKInputStream).read(&buffer, maxLength: 64)
            case .endEncountered, .errorOccurred:
                // Counted last: the test reads `open` as soon as the count is complete.
                s.close()
                _ = open.withLock { $0.removeValue(forKey: ObjectIdentifier(s)) }
                ends.add()
            default: break
            }
        }
        let listener = try TKSocketListener(backlog: 4_096) { fd in
            let (input, output) = TKStream.getStreams(forConnectedSocket: fd)
            output.close()
            input.delegate = handler
            input.schedule(in: TKRunLoop.current, forMode: .default)
            input.open()
            open.withLock { $0[ObjectIdentifier(input)] = input }
        }
        listener.schedule(in: worker.loop, forMode: .default)
        try runClients(port: listener.port, count: count, half: half, ends: ends, worker: worker)
        XCTAssertEqual(open.withLock { $0.count }, 0)
        listener.invalidate()
        // Sockets only: Foundation's Process keeps a run loop of its own (epoll, eventfd, timerfd).
        XCTAssertTrue(
            waitUntil(.now + .seconds(10)) { ProcessProbe.openSockets <= baseline },
            "sockets leaked: \(ProcessProbe.openSockets) > \(baseline)")
    }

    /// Starts the client process, checks the half-open phase, then lets the process exit.
    private func runClients(port: UInt16, count: Int, half: Int, ends: JudgedCounter, worker: IOLoopThread) throws {
        let process = Process()
        process.executableURL = ChildProcess.executable
        process.arguments = ["io-clients", "\(port)", "\(count)", "\(half)"]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        try process.run()
        let output = DrainedPipe(stdout)
        // The half that shut down their sending side end; the others stay open and quiet.
        XCTAssertTrue(waitUntil(.now + .seconds(120)) { ends.count >= half }, "\(ends.count) of \(half) ended")
        worker.sync {}
        let cpuBefore = ProcessProbe.cpuTime
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .milliseconds(300) { usleep(20_000) }
        XCTAssertLessThan(ProcessProbe.cpuTime - cpuBefore, .milliseconds(100), "idle half-open connections must not spin")
        XCTAssertEqual(ends.count, half)
        // The client process exits: every remaining connection ends.
        try stdin.fileHandleForWriting.close()
        process.waitUntilExit()
        XCTAssertEqual(output.text(), "connected \(count)\n")
        XCTAssertTrue(waitUntil(.now + .seconds(120)) { ends.count == count }, "\(ends.count) of \(count) ended")
    }
}

/// A client that sends `payload` and expects it echoed, driven by events on its loop. Its fields
/// are touched on the loop thread only (events), except the Guarded/Recorder results.
final class EchoClient: TKStreamDelegate, @unchecked Sendable {
    let input: TKInputStream
    let output: TKOutputStream
    let payload: [UInt8]
    let chunk: Int
    private var sent = 0
    private var received: [UInt8] = []
    private var buffer = [UInt8](repeating: 0, count: 65_536)
    let finished = Recorder<String>()
    let firstEvent = Guarded<TKStream.Event?>(nil)
    let onLoopThread = Guarded(true)
    private var loopThread: pthread_t?

    init(host: String, port: UInt16, payload: [UInt8], chunk: Int) {
        (input, output) = TKStream.getStreamsToHost(withName: host, port: Int(port))
        self.payload = payload
        self.chunk = chunk
        received.reserveCapacity(payload.count)
    }

    func start(on loop: TKRunLoop) {
        input.delegate = self
        output.delegate = self
        loop.perform { [self] in
            loopThread = pthread_self()
            input.schedule(in: loop, forMode: .default)
            output.schedule(in: loop, forMode: .default)
            input.open()
            output.open()
        }
    }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        if pthread_equal(loopThread!, pthread_self()) == 0 { onLoopThread.withLock { $0 = false } }
        firstEvent.withLock { if $0 == nil { $0 = eventCode } }
        switch eventCode {
        case .hasSpaceAvailable:
            guard sent < payload.count else { return }
            let n = payload[sent...].prefix(chunk).withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            if n > 0 { sent += n }
        case .hasBytesAvailable:
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer[0..<n] }
            if received.count >= payload.count { finish(received == payload ? "ok" : "bytes differ") }
        case .errorOccurred: finish("error \(aStream.streamError.map { "\($0)" } ?? "?")")
        case .endEncountered: finish("ended early after \(received.count) bytes")
        default: break
        }
    }

    private func finish(_ outcome: String) {
        guard finished.count == 0 else { return }
        input.close()
        output.close()
        finished.append(outcome)
    }
}

/// The server side of one echo connection, on the listener's loop: what is read is written back,
/// one write per hasSpaceAvailable; closes when the client's end arrived and all was written.
final class EchoConnection: TKStreamDelegate, @unchecked Sendable {
    private let input: TKInputStream
    private let output: TKOutputStream
    private var pending: [UInt8] = [] // loop thread only
    private var canWrite = false // loop thread only
    private var ended = false // loop thread only
    private let closed = Guarded(false)
    private var buffer = [UInt8](repeating: 0, count: 65_536)

    init(fd: Int32, loop: TKRunLoop) {
        (input, output) = TKStream.getStreams(forConnectedSocket: fd)
        input.delegate = self
        output.delegate = self
        input.schedule(in: loop, forMode: .default)
        output.schedule(in: loop, forMode: .default)
        input.open()
        output.open()
    }

    var isClosed: Bool { closed.withLock { $0 } }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        switch eventCode {
        case .hasBytesAvailable:
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { pending += buffer[0..<n] }
        case .hasSpaceAvailable:
            canWrite = true
        case .endEncountered, .errorOccurred:
            ended = true
        default: break
        }
        if canWrite && !pending.isEmpty {
            let n = pending.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            if n > 0 { pending.removeFirst(n) }
            canWrite = false
        }
        if ended && (pending.isEmpty || output.streamStatus == .error) {
            input.close()
            output.close()
            closed.withLock { $0 = true }
        }
    }
}

/// The README's example, run against the HTTP server.
final class ReadmeClient: TKStreamDelegate {
    func stream(_ s: TKStream, handle event: TKStream.Event) {
        if event == .hasBytesAvailable {
            var b = [UInt8](repeating: 0, count: 4096)
            _ = (s as! TKInputStream).read(&b, maxLength: b.count)
        }
        if event == .endEncountered || event == .errorOccurred {
            s.close()
            TKRunLoop.current.stop()
        }
    }
}

extension StreamTests {
    func testTheReadmeExampleRuns() {
        let server = LoopbackServer(.http(body: "readme"))
        defer { server.stop() }
        let port = Int(server.port)
        let done = Workers.start {
            let client = ReadmeClient()
            let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: port)
            input.delegate = client
            input.schedule(in: .current, forMode: .default) // events arrive on this thread
            input.open()
            output.open()
            let request = Array("GET / HTTP/1.1\r\n\r\n".utf8)
            XCTAssertEqual(output.write(request, maxLength: request.count), request.count)
            TKRunLoop.current.run() // until the delegate stops it
            XCTAssertEqual(input.streamStatus, .closed)
            output.close()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }
}

extension StreamTests {
    func testReadingAndWritingAClosedSocketStreamFailsCleanly() {
        let server = LoopbackServer(.echo)
        defer { server.stop() }
        let baseline = ProcessProbe.openSockets
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(server.port))
        input.open()
        output.open()
        XCTAssertEqual(output.write([1, 2, 3], maxLength: 3), 3)
        var buffer = [UInt8](repeating: 0, count: 3)
        XCTAssertEqual(input.read(&buffer, maxLength: 3) > 0, true)
        input.close()
        output.close()
        XCTAssertEqual(input.read(&buffer, maxLength: 3), -1)
        XCTAssertEqual(output.write(buffer, maxLength: 3), -1)
        XCTAssertFalse(input.hasBytesAvailable)
        XCTAssertFalse(output.hasSpaceAvailable)
        XCTAssertEqual(input.streamStatus, .closed)
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { ProcessProbe.openSockets <= baseline }, "the socket closes with the second stream")
    }

    /// The public names and signatures the tour and benchmarks are written against.
    func testPublicSignatures() throws {
        let types: TKFileDescriptorSource.CallBackTypes = [.read, .write]
        let source = TKFileDescriptorSource(fileDescriptor: -1, closeOnInvalidate: false) {
            (_: TKFileDescriptorSource, _: TKFileDescriptorSource.CallBackTypes) in
        }
        let fd: Int32 = source.fileDescriptor
        source.enableCallBacks(types)
        source.disableCallBacks(.write)
        source.invalidate()
        XCTAssertFalse(source.isValid)
        XCTAssertEqual(fd, -1)
        let pair: (inputStream: TKInputStream, outputStream: TKOutputStream) = TKStream.getBoundStreams(withBufferSize: 8)
        let status: TKStream.Status = pair.inputStream.streamStatus
        XCTAssertEqual(status, .notOpen)
        let _: TKError? = pair.outputStream.streamError
        let _: (inputStream: TKInputStream, outputStream: TKOutputStream) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: 1)
        let listener = try TKSocketListener(host: "127.0.0.1", port: 0, backlog: 8) { (_: Int32) in }
        let _: UInt16 = listener.port
        listener.invalidate()
        let events: TKStream.Event = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .errorOccurred, .endEncountered]
        XCTAssertEqual(events.description, "[openCompleted, hasBytesAvailable, hasSpaceAvailable, errorOccurred, endEncountered]")
    }
}
