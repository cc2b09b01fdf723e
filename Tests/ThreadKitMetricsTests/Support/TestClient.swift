// TestClient: the client side of the endpoint tests, over plain blocking sockets (no ThreadKit, so
// the endpoint is judged from outside): connecting, sending a request or part of one, reading a
// whole response, and waiting for the server to close a connection the client never reads, seen
// with poll(2) (POLLRDHUP for a FIN, POLLHUP/POLLERR for a reset) without reading a byte. Any
// thread; each connection is used by one thread.
import ChildProcessRoles
import Glibc
import XCTest

/// POLLRDHUP (Linux; Glibc does not export it without _GNU_SOURCE): the peer shut its writing side.
let pollReadHangUp: Int16 = 0x2000

final class TestConnection {
    let fd: Int32
    /// When connect(2) was called: the server cannot have accepted the connection earlier.
    let connectedAt: ContinuousClock.Instant

    /// Connects to 127.0.0.1:`port`; `receiveBuffer` (bytes) caps what the kernel takes for this
    /// client before it reads, so that a client that does not read holds the server up.
    init(port: UInt16, receiveBuffer: Int32? = nil) throws {
        connectedAt = .now
        do {
            fd = try Exposition.connect(port: port, receiveTimeout: 20, receiveBuffer: receiveBuffer)
        } catch {
            throw TestClientError("\(error)")
        }
    }

    deinit { close(fd) }

    /// Sends all of `text`; false if the connection is gone.
    @discardableResult
    func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBufferPointer { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    func sendRequest(path: String = "/metrics") { send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n") }

    /// Reads until the server's end of stream: the whole response (nil on a reset or a timeout).
    func readToEnd() -> [UInt8]? {
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return response }
            if n < 0 { return nil }
            response += buffer[0..<n]
        }
    }

    /// The server closed (FIN) or reset the connection; reads nothing.
    var closedByServer: Bool {
        var p = pollfd(fd: fd, events: pollReadHangUp, revents: 0)
        return poll(&p, 1, 0) > 0 && p.revents & (pollReadHangUp | Int16(POLLHUP | POLLERR)) != 0
    }
}

/// Waits until the server has closed every connection of `connections` or `deadline` passes,
/// blocking in poll(2); calls `tick` (if any) every `tickEvery` while waiting. Returns the instant
/// each was seen closed (nil for those still open at the deadline).
func waitUntilClosed(
    _ connections: [TestConnection], deadline: ContinuousClock.Instant, tickEvery: Duration = .milliseconds(100),
    tick: (([Bool]) -> Void)? = nil
) -> [ContinuousClock.Instant?] {
    var closedAt = [ContinuousClock.Instant?](repeating: nil, count: connections.count)
    while closedAt.contains(where: { $0 == nil }) && ContinuousClock.now < deadline {
        let open = connections.indices.filter { closedAt[$0] == nil }
        var fds = open.map { pollfd(fd: connections[$0].fd, events: pollReadHangUp, revents: 0) }
        let (s, a) = tickEvery.components
        _ = poll(&fds, nfds_t(fds.count), Int32(s * 1000 + a / 1_000_000_000_000_000))
        let now = ContinuousClock.now
        for (k, i) in open.enumerated() where fds[k].revents & (pollReadHangUp | Int16(POLLHUP | POLLERR)) != 0 { closedAt[i] = now }
        tick?(closedAt.map { $0 != nil })
    }
    return closedAt
}

struct TestClientError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A field of /proc/PID/status in kB (VmRSS, VmHWM), or nil.
func statusKB(_ field: String, pid: pid_t) -> Int? {
    let fd = open("/proc/\(pid)/status", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes = [UInt8](repeating: 0, count: 16_384)
    let n = read(fd, &bytes, bytes.count)
    guard n > 0 else { return nil }
    let line = String(decoding: bytes[0..<n], as: UTF8.self).split(separator: "\n").first { $0.hasPrefix(field + ":") }
    return line?.split(separator: " ").dropFirst().first.flatMap { Int($0) }
}
