// Exposition: the client side of the metrics tour (threadkit-metrics) and of ThreadKitMetricsTests:
// an HTTP request over a plain blocking socket (no ThreadKit on this side, so the page is read the
// way a Prometheus server would read it), and a reader of Prometheus's text format. Any thread; no
// shared state.
import Glibc

/// One sample line of a Prometheus text page: `name{label="value",…} number`.
package struct ExpositionSample {
    package let name: String
    package let labels: [String: String]
    package let value: Double
}

package enum Exposition {
    /// Sends `method path` (GET by default) to 127.0.0.1:`port`; returns the status code and the body.
    package static func get(port: UInt16, path: String, method: String = "GET") throws -> (status: Int, body: String) {
        let fd = try connect(port: port, receiveTimeout: 10)
        defer { close(fd) }
        let request = Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBufferPointer { send(fd, $0.baseAddress! + sent, $0.count - sent, 0) }
            guard n > 0 else { throw ExpositionError("send failed: errno \(errno)") }
            sent += n
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { break }
            guard n > 0 else { throw ExpositionError("recv failed: errno \(errno)") }
            response += buffer[0..<n]
        }
        guard let split = (0..<max(0, response.count - 3)).first(where: { response[$0..<$0 + 4].elementsEqual([13, 10, 13, 10]) }) else {
            throw ExpositionError("no HTTP head in the response")
        }
        let statusLine = String(decoding: response[..<split].prefix { $0 != 13 }, as: UTF8.self)
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw ExpositionError("bad status line: \(statusLine)") }
        return (status, String(decoding: response[(split + 4)...], as: UTF8.self))
    }

    /// A blocking TCP socket connected to 127.0.0.1:`port`, whose reads time out after
    /// `receiveTimeout` seconds; `receiveBuffer` (bytes), when given, caps what the kernel takes
    /// for it before it reads. The caller closes it.
    package static func connect(port: UInt16, receiveTimeout: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        try connectLoopback(port: port) { fd in
            if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
            var timeout = timeval(tv_sec: receiveTimeout, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
    }

    /// A blocking TCP socket connected to 127.0.0.1:`port`, with `configure` run on it before the
    /// connect (socket options). The caller closes it.
    package static func connectLoopback(port: UInt16, configure: (Int32) -> Void = { _ in }) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ExpositionError("socket() failed: errno \(errno)") }
        configure(fd)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let e = errno
            close(fd)
            throw ExpositionError("connect to 127.0.0.1:\(port) failed: errno \(e)")
        }
        return fd
    }

    /// The sample lines of a text page (comments and blank lines skipped).
    package static func parse(_ page: String) -> [ExpositionSample] {
        page.split(separator: "\n").compactMap { line -> ExpositionSample? in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                return nil
            }
            let series = line[..<space]
            guard let brace = series.firstIndex(of: "{") else { return ExpositionSample(name: String(series), labels: [:], value: value) }
            var labels: [String: String] = [:]
            for pair in series[series.index(after: brace)..<series.index(before: series.endIndex)].split(separator: ",") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                if kv.count == 2 { labels[String(kv[0])] = String(kv[1].dropFirst().dropLast()) }
            }
            return ExpositionSample(name: String(series[..<brace]), labels: labels, value: value)
        }
    }
}

extension Array where Element == ExpositionSample {
    /// The value of the sample named `name` whose labels include `labels`.
    package func value(_ name: String, _ labels: [String: String]) -> Double? {
        first { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }?.value
    }
}

package struct ExpositionError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
