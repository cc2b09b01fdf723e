// HTTPResponse: one complete HTTP/1.1 response (head and body in one array), immutable once made,
// so that every connection sending it holds a reference to the same bytes instead of a copy: the
// page rendering shared by a TKMetricsHTTPEndpoint's clients for its render interval, or a small
// status answer (404, 405, 431, 503). Any thread (immutable).

/// A response as sent on the wire. Immutable: shared by every connection sending it.
final class HTTPResponse: Sendable {
    /// Status line, headers, blank line and body.
    let bytes: [UInt8]
    /// A rendering of the page (counted in the bytes in flight), not a status answer.
    let isPage: Bool
    /// When the page was rendered.
    let madeAt: ContinuousClock.Instant

    init(_ status: Int, _ reason: String, _ body: [UInt8], type: String, isPage: Bool = false) {
        let head = Array(
            ("HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\n"
                + "Connection: close\r\n\r\n").utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(head.count + body.count)
        bytes += head
        bytes += body
        self.bytes = bytes
        self.isPage = isPage
        madeAt = .now
    }

    /// A short plain-text answer.
    convenience init(_ status: Int, _ reason: String, text: String) {
        self.init(status, reason, Array(text.utf8), type: "text/plain; charset=utf-8")
    }
}
