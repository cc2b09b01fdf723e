// TKMetricsHTTPEndpoint: a minimal HTTP/1.1 server for a metrics exposition page (Prometheus's
// text format, or any text), built on ThreadKit's own run-loop I/O: a TKSocketListener and the
// accepted sockets' TKStreams, all on one run-loop thread (`threadkit-metrics-http`). One request
// per connection (`Connection: close`): `GET <path>` gets 200 and the body, another path 404,
// another method 405, a request head over 16 KiB 431.
//
// Threads: init and `stop` from any thread; accepting, reading, the body closure and writing on
// the endpoint's loop thread. `connections` is loop-thread only; `stopping` is an atomic.
import Glibc
import Synchronization
import ThreadKit

/// Serves a metrics page over HTTP on a ThreadKit run-loop thread, for a Prometheus server to
/// scrape.
///
/// ```swift
/// let endpoint = try TKMetricsHTTPEndpoint(port: 9464) {
///     exporter.report()
///     return registry.emitToBuffer()
/// }
/// ```
public final class TKMetricsHTTPEndpoint: @unchecked Sendable {
    // safety: @unchecked because `connections` is touched on the loop thread only and `loop` is
    // written once before init returns (published by the `ready` semaphore).

    /// The port the endpoint listens on (the one chosen by the system when `port` was 0).
    public let port: UInt16
    /// The path served (`/metrics` by default).
    public let path: String

    private let listener: TKSocketListener
    private let body: @Sendable () -> [UInt8]
    private let contentType: String
    private let stopping = Atomic<Bool>(false)
    private let finished = TKDispatchSemaphore(value: 0)
    private var loop: TKRunLoop? // written once by the loop thread before init returns
    private var connections: [ObjectIdentifier: HTTPConnection] = [:] // loop thread only

    /// Listens on `host`:`port` (0: any free port) and serves `GET path` with what `body` returns,
    /// called on the endpoint's thread for each request.
    ///
    /// - Throws: `TKError` when the address cannot be listened on (see `TKSocketListener`).
    public init(
        host: String = "127.0.0.1", port: UInt16 = 0, path: String = "/metrics",
        contentType: String = "text/plain; version=0.0.4; charset=utf-8",
        body: @escaping @Sendable () -> [UInt8]
    ) throws(TKError) {
        self.path = path
        self.body = body
        self.contentType = contentType
        let accepted = AcceptBox()
        listener = try TKSocketListener(host: host, port: port) { fd in
            if let endpoint = accepted.endpoint { endpoint.accept(fd) } else { close(fd) }
        }
        self.port = listener.port
        accepted.endpoint = self
        let ready = TKDispatchSemaphore(value: 0)
        let thread = TKThread(name: "threadkit-metrics-http") { [self] in
            let loop = TKRunLoop.current
            self.loop = loop
            listener.schedule(in: loop, forMode: .default)
            _ = ready.signal()
            while !stopping.load(ordering: .acquiring) {
                _ = loop.run(mode: .default, before: .now + .seconds(1))
            }
            listener.invalidate()
            for connection in connections.values { connection.close() }
            connections.removeAll()
            accepted.endpoint = nil
            _ = finished.signal()
        }
        thread.start()
        ready.wait()
    }

    /// Stops listening, closes open connections and ends the endpoint's thread; returns when it
    /// has ended. Stopping twice does nothing.
    public func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop?.perform { [self] in loop?.stop() }
        loop?.wakeUp()
        finished.wait()
    }

    /// Breaks the listener → endpoint reference cycle: the listener's callback holds this box,
    /// which holds the endpoint until its thread ends. Touched on the loop thread (and once in init
    /// before the thread starts).
    private final class AcceptBox: @unchecked Sendable {
        // safety: written in init before the loop thread starts, then on the loop thread only.
        var endpoint: TKMetricsHTTPEndpoint?
    }

    /// Loop thread: a new connection.
    private func accept(_ fd: Int32) {
        guard let loop, !stopping.load(ordering: .acquiring) else {
            close(fd)
            return
        }
        let connection = HTTPConnection(fd: fd, loop: loop) { [self] head in respond(to: head) }
        connection.onClose = { [self] in connections[ObjectIdentifier(connection)] = nil }
        connections[ObjectIdentifier(connection)] = connection
        connection.open()
    }

    /// The response to a request head (the bytes before the blank line). Loop thread.
    private func respond(to head: [UInt8]?) -> [UInt8] {
        guard let head else { return Self.response(431, "Request Header Fields Too Large", [], type: "text/plain") }
        let requestLine = String(decoding: head.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return Self.response(400, "Bad Request", Array("not an HTTP/1.x request line\n".utf8), type: "text/plain")
        }
        guard parts[0] == "GET" else { return Self.response(405, "Method Not Allowed", Array("only GET\n".utf8), type: "text/plain") }
        let target = parts[1].split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        guard target == path else {
            return Self.response(404, "Not Found", Array("the metrics are at \(path)\n".utf8), type: "text/plain")
        }
        return Self.response(200, "OK", body(), type: contentType)
    }

    static func response(_ status: Int, _ reason: String, _ body: [UInt8], type: String) -> [UInt8] {
        let head =
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\n"
            + "Connection: close\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// One accepted connection: reads the request head, writes the response, closes. Loop thread only.
private final class HTTPConnection: TKStreamDelegate, @unchecked Sendable {
    // safety: every member is touched on the endpoint's loop thread only (the streams' delegate
    // calls and the endpoint's accept/close run there).
    static let maxHead = 16_384

    private let input: TKInputStream
    private let output: TKOutputStream
    private let respond: ([UInt8]?) -> [UInt8]
    var onClose: (() -> Void)?
    private var request: [UInt8] = []
    private var response: [UInt8]?
    private var written = 0
    private var canWrite = false
    private var closed = false

    init(fd: Int32, loop: TKRunLoop, respond: @escaping ([UInt8]?) -> [UInt8]) {
        (input, output) = TKStream.getStreams(forConnectedSocket: fd)
        self.respond = respond
        input.schedule(in: loop, forMode: .default)
        output.schedule(in: loop, forMode: .default)
    }

    func open() {
        input.delegate = self
        output.delegate = self
        input.open()
        output.open()
    }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        guard !closed else { return }
        switch eventCode {
        case .hasBytesAvailable where response == nil:
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { request += buffer[0..<n] }
            if let end = Self.headEnd(request) {
                response = respond(Array(request[..<end]))
            } else if request.count > Self.maxHead {
                response = respond(nil)
            }
        case .hasSpaceAvailable:
            canWrite = true
        case .endEncountered, .errorOccurred:
            if response == nil || aStream === output || eventCode == .errorOccurred { return close() }
        default:
            break
        }
        flush()
    }

    private func flush() {
        guard canWrite, let response, written < response.count else { return }
        let n = response.withUnsafeBufferPointer { output.write($0.baseAddress! + written, maxLength: $0.count - written) }
        canWrite = false
        if n < 0 { return close() }
        written += n
        if written == response.count { close() }
    }

    /// The index of the blank line ending the head ("\r\n\r\n"), if it has arrived.
    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }

    func close() {
        guard !closed else { return }
        closed = true
        input.delegate = nil
        output.delegate = nil
        input.close()
        output.close()
        onClose?()
        onClose = nil
    }
}
