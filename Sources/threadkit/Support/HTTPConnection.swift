// HTTPConnection: the scenarios' NSURLConnection, a GET over a TKStream pair. As with
// NSURLConnection created with `startImmediately: NO`, it is scheduled in a run loop's mode,
// started, and from then on every step (connect, send the request, read the response, call the
// delegate's closures) happens on that loop's thread while the loop runs — and not at all while
// it does not. Loop thread only after `start()`; `cancel()` belongs on the loop's thread too (as
// AFNetworking's cancelConnection, sent there with perform).
import ChildProcessRoles
import ThreadKit

// safety: touched on the loop's thread only after `start()` (see the header).
final class HTTPConnection: TKStreamDelegate, @unchecked Sendable {
    /// What the connection tells its owner, on the loop's thread (NSURLConnectionDataDelegate).
    struct Callbacks {
        var didReceiveResponse: (_ status: Int, _ contentLength: Int) -> Void = { _, _ in }
        var didReceiveData: (_ bytes: Int) -> Void = { _ in }
        var didFinishLoading: () -> Void = {}
        var didFail: (_ error: String) -> Void = { _ in }
    }

    let path: String
    var callbacks: Callbacks
    private let input: TKInputStream
    private let output: TKOutputStream
    private var request: [UInt8]
    private var sent = 0
    private var header: [UInt8] = []
    private var contentLength: Int?
    /// Body bytes received, and whether each was the byte the server's pattern says.
    private(set) var received = 0
    private(set) var bodyIntact = true
    private var ended = false
    private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 65_536)

    init(host: String = "127.0.0.1", port: UInt16, path: String, callbacks: Callbacks = Callbacks()) {
        self.path = path
        self.callbacks = callbacks
        request = Array("GET \(path) HTTP/1.0\r\nHost: \(host)\r\n\r\n".utf8)
        (input, output) = TKStream.getStreamsToHost(withName: host, port: Int(port))
        input.delegate = self
        output.delegate = self
    }

    deinit { buffer.deallocate() }

    func schedule(in loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        input.schedule(in: loop, forMode: mode)
        output.schedule(in: loop, forMode: mode)
    }

    /// Opens the streams: the connection proceeds as the loop runs.
    func start() {
        input.open()
        output.open()
    }

    /// Stops the connection: no more callbacks; the server sees the connection close.
    func cancel() { finish(nil, notify: false) }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        guard !ended else { return }
        if eventCode.contains(.errorOccurred) {
            return finish("\(aStream.streamError.map { "\($0)" } ?? "stream error")", notify: true)
        }
        if eventCode.contains(.hasSpaceAvailable) && aStream === output { sendRequest() }
        if eventCode.contains(.hasBytesAvailable) && aStream === input { readResponse() }
        if eventCode.contains(.endEncountered) && aStream === input {
            if let length = contentLength, received == length {
                finish(nil, notify: true)
            } else {
                finish("the server closed the connection after \(received) body bytes", notify: true)
            }
        }
    }

    private func sendRequest() {
        while sent < request.count && output.hasSpaceAvailable {
            let n = request.withUnsafeBufferPointer { output.write($0.baseAddress! + sent, maxLength: request.count - sent) }
            if n <= 0 { return }
            sent += n
        }
    }

    private func readResponse() {
        while !ended && input.hasBytesAvailable {
            let n = input.read(buffer, maxLength: 65_536)
            if n <= 0 { return }
            let bytes = UnsafeBufferPointer(start: buffer, count: n)
            guard contentLength == nil else {
                consume(bytes)
                continue
            }
            header.append(contentsOf: bytes)
            guard let end = headerEnd() else { continue }
            let body = Array(header[end...])
            header.removeSubrange(end...)
            let (status, length) = parseHeader()
            contentLength = length
            callbacks.didReceiveResponse(status, length)
            consume(body)
        }
    }

    /// Counts body bytes and checks them against the server's pattern.
    private func consume<C: Collection>(_ chunk: C) where C.Element == UInt8 {
        guard !chunk.isEmpty else { return }
        for (i, byte) in chunk.enumerated() where byte != TinyHTTPServer.byte(at: received + i) {
            bodyIntact = false
            break
        }
        received += chunk.count
        callbacks.didReceiveData(chunk.count)
    }

    private func headerEnd() -> Int? {
        guard header.count >= 4 else { return nil }
        for i in 3..<header.count where header[i - 3] == 13 && header[i - 2] == 10 && header[i - 1] == 13 && header[i] == 10 {
            return i + 1
        }
        return nil
    }

    private func parseHeader() -> (status: Int, length: Int) {
        let lines = String(decoding: header, as: UTF8.self).split(separator: "\r\n")
        let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        let length =
            lines.compactMap { line -> Int? in
                let kv = line.split(separator: ":", maxSplits: 1)
                guard kv.count == 2, kv[0].lowercased() == "content-length" else { return nil }
                return Int(kv[1].trimmingCharacters(in: " "))
            }.first ?? 0
        return (status, length)
    }

    private func finish(_ error: String?, notify: Bool) {
        guard !ended else { return }
        ended = true
        input.close()
        output.close()
        guard notify else { return }
        if let error { callbacks.didFail(error) } else { callbacks.didFinishLoading() }
    }
}

extension Substring {
    func trimmingCharacters(in set: Character) -> Substring {
        var s = self
        while s.first == set { s.removeFirst() }
        while s.last == set { s.removeLast() }
        return s
    }
}
