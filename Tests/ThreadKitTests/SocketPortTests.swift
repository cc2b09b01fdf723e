// TKSocketPort: messages between processes over loopback TCP and Unix sockets. The other process
// is `ThreadKitTestChild port-…`; malformed input is written with plain sockets. What arrives is
// judged by the receiving delegate's own record (PortCollector), not by the port.
import ChildProcessRoles
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

/// Writes raw bytes to a listener with a plain socket, then closes (or keeps) the connection.
enum RawClient {
    static func connect(tcpPort: UInt16) -> Int32 {
        do { return try Exposition.connectLoopback(port: tcpPort) } catch {
            XCTFail("\(error)")
            return -1
        }
    }

    static func write(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }
}

/// A listening port on its own loop thread, with a collector as delegate and a record of the
/// connections it refused.
final class Listener: @unchecked Sendable {
    let worker = LoopThread(name: "listener")
    let port: TKSocketPort
    let collector: PortCollector
    let refusals = Guarded<[String]>([])
    let refused = DispatchSemaphore(value: 0)

    init(_ port: TKSocketPort, onMessage: (@Sendable (TKPortMessage) -> Void)? = nil) {
        self.port = port
        collector = PortCollector(onMessage: onMessage)
        port.delegate = collector
        port.connectionErrorHandler = { [weak self] error in
            self?.refusals.withLock { $0.append(error.message) }
            self?.refused.signal()
        }
        worker.loop.add(port, forMode: .default)
    }

    func waitForMessages(_ n: Int, timeout: Double = 60) -> Bool {
        waitUntil(.now + .seconds(timeout)) { collector.count >= n }
    }

    func finish() {
        port.invalidate()
        worker.finish()
    }
}

final class SocketPortTests: XCTestCase {
    var directory = ""

    override func setUp() {
        directory = NSTemporaryDirectory() + "tk-socketport-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    func testMessagesCrossFromAnotherProcessOverTCPInOrder() throws {
        let listener = Listener(try TKSocketPort(tcpPort: 0))
        defer { listener.finish() }
        let port = try XCTUnwrap(listener.port.localPort)
        XCTAssertNotEqual(port, 0)
        let count = stress(20_000)
        let result = try ChildProcess.run("port-send", ["tcp:\(port)", "\(count)", "16"])
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertEqual(result.standardOutput, "sent \(count)\n")
        XCTAssertTrue(listener.waitForMessages(count), "received \(listener.collector.count) of \(count)")
        XCTAssertEqual(listener.collector.ids, (0..<count).map(UInt32.init))
        XCTAssertTrue(listener.collector.received.withLock { $0.allSatisfy { $0.data == [UInt8](repeating: 7, count: 16) } })
    }

    func testMessagesCrossFromAnotherProcessOverAUnixSocket() throws {
        let path = directory + "/port.sock"
        let listener = Listener(try TKSocketPort(unixSocketPath: path))
        defer { listener.finish() }
        let count = stress(20_000)
        let result = try ChildProcess.run("port-send", ["unix:\(path)", "\(count)"])
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(listener.waitForMessages(count))
        XCTAssertEqual(listener.collector.ids, (0..<count).map(UInt32.init))
        XCTAssertTrue(
            listener.collector.received.withLock { $0.allSatisfy { $0.thread == Int32(listener.worker.thread.attributes.current.tid) } })
    }

    func testAnotherProcessAnswersThroughTheReplyPort() throws {
        let out = Pipe()
        let child = try ChildProcess.start("port-echo", ["tcp:0"], stdout: out)
        defer {
            if child.isRunning { child.terminate() }
            child.waitUntilExit()
        }
        let line = try XCTUnwrap(LineReader(out).next(timeout: 30))
        XCTAssertTrue(line.hasPrefix("listening tcp:"), line)
        let remote = try TKSocketPort(remoteHost: "127.0.0.1", port: try XCTUnwrap(UInt16(line.dropFirst("listening tcp:".count))))
        let replies = Listener(try TKSocketPort(tcpPort: 0))
        defer { replies.finish() }
        let message = TKPortMessage(
            sendPort: remote, receivePort: replies.port, components: [.data(Array("hello".utf8)), .port(replies.port)])
        message.msgid = 1000
        XCTAssertTrue(message.send(before: .now + .seconds(30)), message.failureReason ?? "")
        XCTAssertTrue(replies.waitForMessages(1))
        let answer = try XCTUnwrap(replies.collector.received.withLock { $0.first })
        XCTAssertEqual(answer.msgid, 1001)
        XCTAssertEqual(answer.data, Array("hello".utf8))
        XCTAssertTrue(answer.message.receivePort === replies.port)
        // The port component came back as a remote port for our own listener's address.
        guard case .port(let echoed)? = answer.message.components.last, let echoedPort = echoed as? TKSocketPort else {
            return XCTFail("the port component did not come back")
        }
        XCTAssertEqual(echoedPort.address, replies.port.address)
        XCTAssertTrue(echoedPort.isRemote)
        let stop = TKPortMessage(sendPort: remote, receivePort: nil, components: [])
        stop.msgid = UInt32.max
        XCTAssertTrue(stop.send(before: .now + .seconds(30)))
        child.waitUntilExit()
        XCTAssertEqual(child.terminationStatus, 0)
    }

    func testAPeerThatDisappearsMakesLaterSendsFailFast() throws {
        let out = Pipe()
        let child = try ChildProcess.start("port-echo", ["tcp:0"], stdout: out)
        let line = try XCTUnwrap(LineReader(out).next(timeout: 30))
        let remote = try TKSocketPort(remoteHost: "127.0.0.1", port: try XCTUnwrap(UInt16(line.dropFirst("listening tcp:".count))))
        XCTAssertTrue(sendMessage(remote, 1))
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        let start = ContinuousClock.now
        let message = TKPortMessage(sendPort: remote, receivePort: nil, components: [])
        XCTAssertFalse(message.send(before: start + .seconds(30)))
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(25), "a vanished peer must not make a send wait for its deadline")
        XCTAssertNotNil(message.failureReason)
        XCTAssertFalse(sendMessage(remote, 2, before: .now + .seconds(30)))
    }

    func testAMessagePortCannotCrossProcesses() throws {
        let listener = Listener(try TKSocketPort(tcpPort: 0))
        defer { listener.finish() }
        let remote = try TKSocketPort(remoteHost: "127.0.0.1", port: try XCTUnwrap(listener.port.localPort))
        let message = TKPortMessage(sendPort: remote, receivePort: TKMessagePort(), components: [])
        XCTAssertFalse(message.send(before: .now + .seconds(30)))
        XCTAssertTrue(message.failureReason?.contains("TKMessagePort") == true, message.failureReason ?? "")
        let withComponent = TKPortMessage(sendPort: remote, receivePort: nil, components: [.port(TKMessagePort())])
        XCTAssertFalse(withComponent.send(before: .now + .seconds(30)))
    }

    func testBadFramesCloseTheirConnectionAndTheListenerCarriesOn() throws {
        let listener = Listener(try TKSocketPort(tcpPort: 0))
        defer { listener.finish() }
        let port = try XCTUnwrap(listener.port.localPort)
        let good = try PortWireFormat.encode(.init(msgid: 5, reply: nil, components: [.data([1])])).get()
        let cases: [(String, [UInt8], String)] = [
            ("oversized", [0x10, 0, 0, 0], "oversized"),
            ("bad magic", [0, 0, 0, 9] + Array("XXXX".utf8) + [1, 0, 0, 0, 0], "magic"),
            ("truncated", Array(good.dropLast(1)), "truncated"),
            ("lying count", [0, 0, 0, 14] + Array("TKPM".utf8) + [1, 0, 0, 0, 5, 0, 0xFF, 0xFF, 0xFF, 0xFF], "components"),
            ("trailing bytes", [0, 0, 0, UInt8(good.count - 4 + 1)] + good.dropFirst(4) + [0], "after the last"),
            ("unknown kind", [0, 0, 0, 17] + Array("TKPM".utf8) + [1, 0, 0, 0, 5, 0, 0, 0, 0, 1, 9, 0, 0], "kind"),
        ]
        for (name, bytes, reason) in cases {
            let fd = RawClient.connect(tcpPort: port)
            RawClient.write(fd, bytes)
            if name == "truncated" { close(fd) }
            XCTAssertEqual(listener.refused.wait(timeout: .now() + 30), .success, "\(name): no refusal")
            let logged = listener.refusals.withLock { $0.last ?? "" }
            XCTAssertTrue(logged.contains(reason), "\(name): \(logged)")
            if name != "truncated" {
                // The listener closed its side: reading gives EOF.
                var byte: UInt8 = 0
                XCTAssertEqual(recv(fd, &byte, 1, 0), 0, "\(name): connection not closed")
                close(fd)
            }
        }
        // A good frame on a new connection still arrives.
        let fd = RawClient.connect(tcpPort: port)
        RawClient.write(fd, good)
        XCTAssertTrue(listener.waitForMessages(1))
        XCTAssertEqual(listener.collector.ids, [5])
        close(fd)
        XCTAssertEqual(listener.refusals.withLock { $0.count }, cases.count)
    }

    func testAFullListenerMakesTheSenderWaitAndLosesNothing() throws {
        // The listener's loop does not run until every message was sent: reading pauses when its
        // queue is full, the socket buffers fill, and the sender waits; then all arrive in order.
        let listener = Listener(try TKSocketPort(tcpPort: 0))
        defer { listener.finish() }
        let gate = DispatchSemaphore(value: 0)
        listener.worker.loop.perform { _ = gate.wait(timeout: .now() + 60) }
        let remote = try TKSocketPort(remoteHost: "127.0.0.1", port: try XCTUnwrap(listener.port.localPort))
        let count = TKSocketPort.defaultQueueLimit + stress(50_000)
        let sender = TestThread {
            for i in 0..<count where !sendMessage(remote, UInt32(i), [1, 2, 3, 4]) {
                XCTFail("send \(i) failed")
                return
            }
        }
        gate.signal()
        XCTAssertTrue(sender.join(until: .now + .seconds(120)))
        XCTAssertTrue(listener.waitForMessages(count))
        XCTAssertEqual(listener.collector.ids, (0..<count).map(UInt32.init))
    }

    func testBadArgumentsAreRefused() throws {
        XCTAssertThrowsError(try TKSocketPort(remoteHost: "127.0.0.1", port: 0)) {
            XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try TKSocketPort(remoteHost: "no-such-host.invalid", port: 9)) {
            XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try TKSocketPort(unixSocketPath: String(repeating: "x", count: 200))) {
            XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try TKSocketPort(unixSocketPath: directory + "/missing/port.sock")) {
            XCTAssertEqual(($0 as? TKError)?.code, .systemCall)
        }
        XCTAssertThrowsError(try TKSocketPort(unixSocketPath: directory)) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
        let live = try TKSocketPort(unixSocketPath: directory + "/live.sock")
        XCTAssertThrowsError(try TKSocketPort(unixSocketPath: directory + "/live.sock"), "a live listener's path is refused")
        live.invalidate()
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/live.sock"), "invalidate removes the socket file")
        let taken = try TKSocketPort(tcpPort: 0)
        XCTAssertThrowsError(try TKSocketPort(tcpPort: try XCTUnwrap(taken.localPort))) {
            XCTAssertEqual(($0 as? TKError)?.errno, EADDRINUSE)
        }
        XCTAssertNil(try TKSocketPort(remoteHost: "127.0.0.1", port: 9).localPort)
    }

    func testAStaleSocketFileIsReplaced() throws {
        let path = directory + "/stale.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            _ = path.utf8CString.withUnsafeBytes { memcpy(raw.baseAddress!, $0.baseAddress!, $0.count) }
        }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        close(fd) // bound, never listened, closed: a stale file
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        let port = try TKSocketPort(unixSocketPath: path)
        port.invalidate()
    }
}

final class PortWireFormatTests: XCTestCase {
    func testFramesRoundTripWhateverTheChunking() throws {
        let frames: [PortWireFormat.Frame] = [
            .init(msgid: 0, reply: nil, components: []),
            .init(
                msgid: 1000, reply: .tcp(host: "127.0.0.1", port: 4242),
                components: [.data(Array(0..<200)), .port(.unix(path: "/tmp/x.sock"))]),
            .init(msgid: UInt32.max, reply: .unix(path: "/tmp/ü.sock"), components: [.data([]), .data([9])]),
        ]
        let stream = try frames.flatMap { try PortWireFormat.encode($0).get() }
        for chunk in [1, 3, 7, 64, stream.count] {
            var decoder = PortWireFormat.Decoder()
            var decoded: [PortWireFormat.Frame] = []
            var offset = 0
            while offset < stream.count {
                let end = min(offset + chunk, stream.count)
                stream[offset..<end].withUnsafeBytes { decoder.append($0) }
                offset = end
                while case .success(let frame?) = decoder.next() { decoded.append(frame) }
            }
            XCTAssertEqual(decoded, frames, "chunk \(chunk)")
            XCTAssertEqual(decoder.pendingByteCount, 0)
        }
    }

    func testTheSizeLimitIsEnforcedBothWays() {
        let big = PortWireFormat.Frame(
            msgid: 1, reply: nil, components: [.data([UInt8](repeating: 0, count: PortWireFormat.maximumBodyLength))])
        guard case .failure(.oversized) = PortWireFormat.encode(big) else { return XCTFail("an oversized frame was encoded") }
        var decoder = PortWireFormat.Decoder()
        ([0x04, 0x00, 0x00, 0x01] as [UInt8]).withUnsafeBytes { decoder.append($0) }
        guard case .failure(.oversized(let n)) = decoder.next() else { return XCTFail("an oversized length was accepted") }
        XCTAssertEqual(n, (64 << 20) + 1)
    }
}
