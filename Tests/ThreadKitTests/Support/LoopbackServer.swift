// LoopbackServer: a tiny TCP server on 127.0.0.1 for the stream tests, built on plain POSIX
// sockets and Foundation threads (one per connection), so it is independent of the code under
// test. Modes: echo, a one-shot HTTP answer, reset (RST at once), silent (accepts, never reads
// until `drain()`).
import Foundation
import Glibc
import ThreadKit
import XCTest

final class LoopbackServer: @unchecked Sendable {
    enum Mode: Sendable {
        case echo
        case http(body: String)
        case reset
        case silent
    }

    let port: UInt16
    private let mode: Mode
    private let listenFD: Int32
    private let accepting = DispatchGroup()
    /// Silent mode: the connections held, and how many bytes `drain()` has read. Guarded.
    private let held = Guarded<[Int32]>([])
    let drained = JudgedCounter()
    private let draining = DispatchSemaphore(value: 0)
    private let stopped = Guarded(false)

    init(_ mode: Mode) {
        self.mode = mode
        let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.listenFD = listenFD
        var one: Int32 = 1
        setsockopt(listenFD, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = LoopbackClient.loopback(0)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        listen(listenFD, 1024)
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &length) }
        }
        port = UInt16(bigEndian: bound.sin_port)
        startAccepting()
    }

    private func startAccepting() {
        accepting.enter()
        Thread { [self] in
            while true {
                let fd = accept(listenFD, nil, nil)
                if fd < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    break
                }
                serve(fd)
            }
            accepting.leave()
        }.start()
    }

    private func serve(_ fd: Int32) {
        switch mode {
        case .reset:
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            close(fd)
        case .silent:
            held.withLock { $0.append(fd) }
        case .echo:
            Thread {
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = read(fd, &buffer, buffer.count)
                    if n <= 0 { break }
                    var offset = 0
                    while offset < n {
                        let w = buffer.withUnsafeBytes { send(fd, $0.baseAddress! + offset, n - offset, Int32(MSG_NOSIGNAL)) }
                        if w <= 0 { break }
                        offset += w
                    }
                }
                close(fd)
            }.start()
        case .http(let body):
            Thread {
                var request: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !String(decoding: request, as: UTF8.self).contains("\r\n\r\n") {
                    let n = read(fd, &buffer, buffer.count)
                    if n <= 0 { break }
                    request += buffer[0..<n]
                }
                let answer = "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
                _ = answer.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                close(fd)
            }.start()
        }
    }

    /// Silent mode: starts reading every held connection to its end, counting bytes.
    func drain() {
        for fd in held.withLock({ $0 }) {
            Thread { [drained] in
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = read(fd, &buffer, buffer.count)
                    if n <= 0 { break }
                    drained.add(n)
                }
            }.start()
        }
    }

    func stop() {
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
        XCTAssertEqual(accepting.wait(timeout: .now() + 10), .success)
        for fd in held.withLock({ $0 }) { close(fd) }
    }
}

/// A stream delegate that hands each event to a closure.
final class StreamHandler: TKStreamDelegate, @unchecked Sendable {
    let handle: @Sendable (TKStream, TKStream.Event) -> Void
    init(_ handle: @escaping @Sendable (TKStream, TKStream.Event) -> Void) { self.handle = handle }
    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) { handle(aStream, eventCode) }
}

/// A deterministic byte pattern for exact-content checks.
func pattern(_ count: Int, seed: Int = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 8) ^ seed) }
}
