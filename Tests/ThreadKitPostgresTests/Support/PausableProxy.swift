// PausableProxy: a TCP proxy between a worker process and the PostgreSQL server, for partition
// tests. `pause()` stops relaying in both directions (the bytes wait in the proxy and the kernel's
// buffers, as during a network partition that heals before TCP gives up); `resume()` relays them
// again. Accepts new connections while paused (they hang, as connects through a partition would
// after the handshake). `dropPackets()` is the harsher partition: what either side sends is
// thrown away (a connection that loses bytes is broken for good, as a TCP connection whose peer
// stopped answering is once TCP gives up), and `heal()` ends it: the broken connections are shut
// down (their owners see the connection fail, as after TCP's timeout) and new ones relay again;
// a connection that sent nothing meanwhile is left intact. Foundation threads and POSIX sockets:
// the tests' own judge, not ThreadKit.
#if Postgres
    import Foundation

    // safety: `paused`, `dropping`, `sockets`, `pairs` and `broken` are guarded by `condition`; the
    // listening socket and the port are immutable after init.
    final class PausableProxy: @unchecked Sendable {
        let port: Int
        private let listener: Int32
        private let upstreamPort: Int
        private let condition = NSCondition()
        private var paused = false // guarded by `condition`
        private var sockets: [Int32] = [] // guarded by `condition`
        private var dropping = false // guarded by `condition`
        /// Each relayed socket's partner (both directions). Guarded by `condition`.
        private var pairs: [Int32: Int32] = [:]
        /// Sockets of connections that lost bytes to `dropPackets()`. Guarded by `condition`.
        private var broken: Set<Int32> = []

        /// Listens on 127.0.0.1 at a free port, relaying to 127.0.0.1:`upstreamPort`.
        init(upstreamPort: Int) throws {
            self.upstreamPort = upstreamPort
            let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            self.listener = listener
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, listen(listener, 64) == 0 else { throw PostgresServerUnavailable(message: "proxy: bind/listen failed") }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
            }
            let port = Int(UInt16(bigEndian: address.sin_port))
            self.port = port
            Thread.detachNewThread { [self] in acceptLoop() }
        }

        func pause() { condition.withLock { paused = true } }

        func resume() {
            condition.withLock {
                paused = false
                condition.broadcast()
            }
        }

        /// From now on, throws away what either side sends (a partition that drops packets).
        func dropPackets() { condition.withLock { dropping = true } }

        /// Ends `dropPackets()`: shuts down every connection that lost bytes (its owner sees it
        /// fail) and relays again; returns how many connections were shut down.
        @discardableResult
        func heal() -> Int {
            condition.withLock {
                dropping = false
                for fd in broken { shutdown(fd, Int32(SHUT_RDWR)) }
                return broken.count / 2
            }
        }

        /// Closes every connection and stops listening.
        func close() {
            shutdown(listener, Int32(SHUT_RDWR))
            condition.withLock {
                for fd in sockets { shutdown(fd, Int32(SHUT_RDWR)) }
                paused = false
                condition.broadcast()
            }
        }

        private func acceptLoop() {
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { return }
                let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                address.sin_port = UInt16(upstreamPort).bigEndian
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                if connected != 0 {
                    Glibc.close(client)
                    Glibc.close(upstream)
                    continue
                }
                condition.withLock {
                    sockets += [client, upstream]
                    pairs[client] = upstream
                    pairs[upstream] = client
                }
                Thread.detachNewThread { [self] in relay(from: client, to: upstream) }
                Thread.detachNewThread { [self] in relay(from: upstream, to: client) }
            }
        }

        private func relay(from source: Int32, to destination: Int32) {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                let dropped = condition.withLock { () -> Bool in
                    while paused { condition.wait() }
                    // a connection that lost bytes never relays again: its stream is broken
                    if dropping || broken.contains(source) {
                        broken.insert(source)
                        if let partner = pairs[source] { broken.insert(partner) }
                        return true
                    }
                    return false
                }
                if dropped { continue }
                var sent = 0
                while sent < n {
                    let w = buffer.withUnsafeBytes { write(destination, $0.baseAddress! + sent, n - sent) }
                    if w <= 0 { break }
                    sent += w
                }
            }
            shutdown(destination, Int32(SHUT_RDWR))
        }
    }
#endif
