// TinyHTTPServer: a small blocking HTTP/1.0 server on 127.0.0.1 for the network scenarios, built
// on plain POSIX sockets and threads so that it judges the run-loop side independently. It
// answers `GET /bytes/N` with N bytes and `GET /slow/N/K` with N bytes in K pieces 15 ms apart
// (so that several responses are in flight at once), then closes the connection.
// Threads: one accepting thread, one thread per connection; the counters are atomics read by
// the scenario.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

// safety: the counters are atomic, `connections` under `connectionsLock`; `acceptor` is set in
// init and joined in stop().
final class TinyHTTPServer: @unchecked Sendable {
    let port: UInt16
    /// Connections accepted, requests read, responses sent in full, responses cut short
    /// because the client went away.
    let accepted = Atomic<Int>(0)
    let requests = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
    let abandoned = Atomic<Int>(0)
    private let listener: Int32
    private var acceptor: SpawnedThread? // set in init, joined in stop()
    private let connectionsLock = TKLock()
    private var connections: [SpawnedThread] = [] // guarded by connectionsLock

    /// The byte at `offset` of every body: a pattern a client can check without a copy.
    static func byte(at offset: Int) -> UInt8 { UInt8(truncatingIfNeeded: offset % 251) }

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.listener = listener
        var on: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(listener, sa, len) == 0 && listen(listener, 256) == 0 && getsockname(listener, sa, &len) == 0
            }
        }
        guard ok else { throw ScenarioFailure("the test HTTP server could not listen on 127.0.0.1 (errno \(errno))") }
        port = UInt16(bigEndian: addr.sin_port)
        acceptor = SpawnedThread { [self] in acceptLoop() }
    }

    /// Stops accepting and waits for the connection threads.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        acceptor?.join()
        close(listener)
        for thread in connectionsLock.withLock({ connections }) { thread.join() }
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return // shut down
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            accepted.add(1, ordering: .relaxed)
            let thread = SpawnedThread { [self] in serve(fd) }
            connectionsLock.withLock { connections.append(thread) }
        }
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !request.ends(with: [13, 10, 13, 10]) {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n <= 0 { return }
            request += buffer[0..<n]
            if request.count > 16_384 { return }
        }
        requests.add(1, ordering: .relaxed)
        let line = String(decoding: request.prefix { $0 != 13 }, as: UTF8.self).split(separator: " ")
        let parts = line.count > 1 ? line[1].split(separator: "/") : []
        guard parts.count >= 2, let size = Int(parts[1]), size >= 0 else {
            _ = send(fd, "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        }
        let pieces = parts[0] == "slow" && parts.count > 2 ? max(1, Int(parts[2]) ?? 1) : 1
        guard send(fd, "HTTP/1.0 200 OK\r\nContent-Length: \(size)\r\nContent-Type: application/octet-stream\r\n\r\n") else { return }
        let body = (0..<size).map { Self.byte(at: $0) }
        var offset = 0
        for piece in 0..<pieces {
            if piece > 0 {
                var pause = timespec(tv_sec: 0, tv_nsec: 15_000_000)
                nanosleep(&pause, nil)
            }
            let end = piece == pieces - 1 ? size : (size / pieces) * (piece + 1)
            guard sendAll(fd, body[offset..<end]) else {
                abandoned.add(1, ordering: .relaxed)
                return
            }
            offset = end
        }
        completed.add(1, ordering: .relaxed)
    }

    private func send(_ fd: Int32, _ text: String) -> Bool { sendAll(fd, Array(text.utf8)[...]) }

    /// Writes every byte, or false when the client has gone (EPIPE/ECONNRESET; MSG_NOSIGNAL keeps
    /// SIGPIPE away).
    private func sendAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Bool {
        var sent = bytes.startIndex
        while sent < bytes.endIndex {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + (sent - bytes.startIndex), bytes.endIndex - sent, Int32(MSG_NOSIGNAL))
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }
}

extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}
