// SocketListenerTests: TKSocketListener (CFSocket's accept callback): accepts on the loop thread,
// hands over non-blocking close-on-exec sockets, many clients, invalidation, bad addresses, and
// running out of descriptors without spinning (in a child process). Clients are plain POSIX.
import Foundation
import Glibc
import ThreadKit
import XCTest

final class SocketListenerTests: XCTestCase {
    func testAcceptsOnTheLoopThreadWithNonBlockingCloseOnExecSockets() throws {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let accepted = Recorder<(Int32, Bool)>()
        let listener = try TKSocketListener { fd in accepted.append((fd, worker.isCurrent)) }
        defer { listener.invalidate() }
        XCTAssertNotEqual(listener.port, 0, "port 0 binds a free port and reports it")
        listener.schedule(in: worker.loop, forMode: .default)
        let client = LoopbackClient.connect(port: listener.port)
        defer { close(client) }
        XCTAssertTrue(accepted.wait { $0.count == 1 })
        let (fd, onLoop) = accepted.values[0]
        XCTAssertTrue(onLoop, "the accept callback runs on the loop's thread")
        XCTAssertNotEqual(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "accepted sockets are non-blocking")
        XCTAssertNotEqual(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0, "accepted sockets are close-on-exec")
        // The accepted socket is the client's peer.
        var byte: UInt8 = 42
        XCTAssertEqual(write(client, &byte, 1), 1)
        var got: UInt8 = 0
        XCTAssertEqual(LoopbackClient.readBlocking(fd, &got, 1), 1)
        XCTAssertEqual(got, 42)
        close(fd)
    }

    func testAcceptsEveryClient() throws {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let accepted = Recorder<Int32>()
        let listener = try TKSocketListener(backlog: 1024) { fd in accepted.append(fd) }
        defer { listener.invalidate() }
        listener.schedule(in: worker.loop, forMode: .common)
        let count = stress(300)
        var clients: [Int32] = []
        for _ in 0..<count { clients.append(LoopbackClient.connect(port: listener.port)) }
        XCTAssertTrue(accepted.wait { $0.count == count }, "accepted \(accepted.count) of \(count)")
        XCTAssertEqual(Set(accepted.values).count, count)
        for fd in accepted.values + clients { close(fd) }
    }

    func testNotAcceptedWhileTheLoopRunsAnotherMode() throws {
        let listener = try TKSocketListener { fd in close(fd) }
        defer { listener.invalidate() }
        let client = LoopbackClient.connect(port: listener.port)
        defer { close(client) }
        let done = Workers.start {
            let loop = TKRunLoop.current
            let accepted = JudgedCounter()
            let counting = try! TKSocketListener { fd in
                accepted.add()
                close(fd)
            }
            let other = LoopbackClient.connect(port: counting.port)
            counting.schedule(in: loop, forMode: "io")
            let timer = TKTimer(interval: .seconds(100), repeats: false) { _ in }
            loop.add(timer, forMode: .default)
            _ = loop.run(mode: .default, for: .milliseconds(50), returnAfterSourceHandled: true)
            XCTAssertEqual(accepted.count, 0)
            XCTAssertEqual(loop.run(mode: "io", for: .seconds(10), returnAfterSourceHandled: true), .handledSource)
            XCTAssertEqual(accepted.count, 1)
            timer.invalidate()
            counting.invalidate()
            close(other)
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testInvalidateClosesTheListeningSocket() throws {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let baseline = ProcessProbe.openDescriptors
        let listener = try TKSocketListener { fd in close(fd) }
        listener.schedule(in: worker.loop, forMode: .default)
        XCTAssertTrue(listener.isValid)
        listener.invalidate()
        XCTAssertFalse(listener.isValid)
        XCTAssertEqual(LoopbackClient.connectError(port: listener.port), ECONNREFUSED)
        XCTAssertLessThanOrEqual(ProcessProbe.descriptors(settlingAtMost: baseline), baseline)
    }

    func testBadAddressesThrow() throws {
        let first = try TKSocketListener { fd in close(fd) }
        defer { first.invalidate() }
        XCTAssertThrowsError(try TKSocketListener(port: first.port) { fd in close(fd) }) { error in
            XCTAssertEqual((error as? TKError)?.errno, EADDRINUSE)
        }
        XCTAssertThrowsError(try TKSocketListener(host: "no-such-host.invalid") { fd in close(fd) }) { error in
            XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
            XCTAssertTrue("\(error)".contains("no-such-host.invalid"))
        }
    }

    func testOutOfDescriptorsWaitsWithoutSpinningAndSaysSoOnce() throws {
        let result = try ChildProcess.run("io-listener-emfile")
        XCTAssertEqual(result.status, 0, result.standardError)
        let words = result.standardOutput.split(separator: " ").map(String.init)
        XCTAssertEqual(words.first, "accepted")
        XCTAssertEqual(words.count, 6, result.standardOutput)
        guard words.count == 6 else { return }
        XCTAssertEqual(words[1], "3", "every waiting client is accepted once descriptors come back")
        XCTAssertEqual(words[3], "0", "nothing can be accepted while out of descriptors")
        XCTAssertLessThan(
            Int(words[5].trimmingCharacters(in: .whitespacesAndNewlines)) ?? 999, 150,
            "CPU while out of descriptors for 0.5 s")
        XCTAssertEqual(
            result.standardError.components(separatedBy: "out of file descriptors").count - 1, 1,
            "said once on standard error: \(result.standardError)")
    }
}

/// Plain POSIX client calls for the tests (independent of the code under test).
enum LoopbackClient {
    /// A blocking connect to 127.0.0.1:`port`; fails the test on error.
    static func connect(port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = loopback(port)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        XCTAssertEqual(rc, 0, "connect to 127.0.0.1:\(port): errno \(errno)")
        return fd
    }

    /// The errno of a connect to 127.0.0.1:`port` (0 if it connected).
    static func connectError(port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(fd) }
        var address = loopback(port)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return rc == 0 ? 0 : errno
    }

    static func loopback(_ port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    /// Reads from a possibly non-blocking descriptor, waiting with poll(2) (at most 20 s).
    static func readBlocking(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 20_000) == 1 else { return -1 }
        return read(fd, buffer, count)
    }
}
