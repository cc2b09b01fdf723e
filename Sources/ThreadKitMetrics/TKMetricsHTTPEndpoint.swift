// TKMetricsHTTPEndpoint: a minimal HTTP/1.1 server for a metrics exposition page (Prometheus's
// text format, or any text), built on ThreadKit's own run-loop I/O: a TKSocketListener and the
// accepted sockets' TKStreams (HTTPConnection), all on one run-loop thread
// (`threadkit-metrics-http`). One request per connection (`Connection: close`): `GET <path>` gets
// 200 and the page, another path 404, another method 405, a request head over 16 KiB 431, a
// connection past the cap 503.
//
// What a client can hold is bounded (Limits; docs/Metrics.md §3, "Limits"):
//   1. the page is rendered at most once per `renderInterval`, into one immutable HTTPResponse
//      that every connection asking within the interval sends by reference;
//   2. a new rendering is made only while the renderings still being sent hold under
//      `maxBytesInFlight`; past it a request gets the newest rendering held;
//   3. at most `maxConnections` are open: at the cap, once the heads already received are read, a
//      new connection closes the oldest one still waiting for its head, or else is answered 503
//      and closed at once;
//   4. a request head must arrive within `headerTimeout` of the accept, and the response be read
//      within `sendTimeout` of its start, else the connection is closed (reset, when sending);
//      one timer on the loop, set for the earliest deadline, sweeps them;
//   5. each socket's kernel send buffer is `socketSendBuffer`.
//
// Threads: init, `stop` and `statistics` from any thread; accepting, reading, the body closure,
// writing and the sweep on the endpoint's loop thread. `connections`, `current`, `sweepTimer`,
// `nextSequence` and `warnedAtCap` are loop-thread only; `stopping` is an atomic; `counters` is
// guarded by its mutex (taken last, never around a call out).
import Glibc
import Synchronization
import ThreadKit

/// Serves a metrics page over HTTP on a ThreadKit run-loop thread, for a Prometheus server to
/// scrape, within ``Limits`` that no client can push it past.
///
/// ```swift
/// let endpoint = try TKMetricsHTTPEndpoint(port: 9464) {
///     exporter.report()
///     return registry.emitToBuffer()
/// }
/// ```
public final class TKMetricsHTTPEndpoint: @unchecked Sendable {
    // safety: @unchecked because the loop-thread-only members (see the header) are touched on the
    // loop thread only, `loop` is written once before init returns (published by the `ready`
    // semaphore), and `counters` is a Mutex.

    /// The port the endpoint listens on (the one chosen by the system when `port` was 0).
    public let port: UInt16
    /// The path served (`/metrics` by default).
    public let path: String
    /// The bounds the endpoint keeps.
    public let limits: Limits

    private let listener: TKSocketListener
    private let body: @Sendable () -> [UInt8]
    private let contentType: String
    private let stopping = Atomic<Bool>(false)
    private let finished = TKDispatchSemaphore(value: 0)
    private let counters = Mutex(Statistics())
    private var loop: TKRunLoop? // written once by the loop thread before init returns
    private var connections: [ObjectIdentifier: HTTPConnection] = [:] // loop thread only
    private var current: HTTPResponse? // loop thread only: the newest rendering of the page
    private var sweepTimer: TKTimer? // loop thread only
    private var nextSequence: UInt64 = 0 // loop thread only
    private var warnedAtCap = false // loop thread only

    /// Listens on `host`:`port` (0: any free port) and serves `GET path` with what `body` returns,
    /// called on the endpoint's thread at most once per ``Limits/renderInterval`` and shared by
    /// every request in it.
    ///
    /// - Throws: `TKError(.invalidArgument)` for limits out of range, and `TKError` when the
    ///   address cannot be listened on (see `TKSocketListener`).
    public convenience init(
        host: String = "127.0.0.1", port: UInt16 = 0, path: String = "/metrics",
        contentType: String = "text/plain; version=0.0.4; charset=utf-8",
        body: @escaping @Sendable () -> [UInt8]
    ) throws(TKError) {
        try self.init(host: host, port: port, path: path, contentType: contentType, limits: Limits(), body: body)
    }

    /// As ``init(host:port:path:contentType:body:)``, with `limits` on connections, time and memory
    /// (``Limits``).
    ///
    /// - Throws: `TKError(.invalidArgument)` for limits out of range, and `TKError` when the
    ///   address cannot be listened on (see `TKSocketListener`).
    public init(
        host: String = "127.0.0.1", port: UInt16 = 0, path: String = "/metrics",
        contentType: String = "text/plain; version=0.0.4; charset=utf-8", limits: Limits,
        body: @escaping @Sendable () -> [UInt8]
    ) throws(TKError) {
        try limits.validate()
        self.path = path
        self.body = body
        self.contentType = contentType
        self.limits = limits
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
            sweepTimer?.invalidate()
            sweepTimer = nil
            for connection in Array(connections.values) { connection.close(.stopped) }
            current = nil
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

    /// What the endpoint has done with its connections so far. Any thread.
    public var statistics: Statistics { counters.withLock { $0 } }

    /// Breaks the listener → endpoint reference cycle: the listener's callback holds this box,
    /// which holds the endpoint until its thread ends. Touched on the loop thread (and once in init
    /// before the thread starts).
    private final class AcceptBox: @unchecked Sendable {
        // safety: written in init before the loop thread starts, then on the loop thread only.
        var endpoint: TKMetricsHTTPEndpoint?
    }

    // MARK: Connections (loop thread)

    /// A new connection: kept (making room at the cap by closing the oldest one still waiting
    /// for its head), or refused with 503.
    private func accept(_ fd: Int32) {
        guard let loop, !stopping.load(ordering: .acquiring) else {
            close(fd)
            return
        }
        if connections.count >= limits.maxConnections {
            // Requests already in the kernel are answered first: only a connection with no
            // complete head after that is taken for idle.
            for connection in connections.values.sorted(by: { $0.sequence < $1.sequence }) { connection.catchUp() }
            let waiting = connections.values.filter { $0.phase == .readingHead }
            guard let oldest = waiting.min(by: { $0.sequence < $1.sequence }) else { return refuse(fd) }
            oldest.close(.evicted)
        }
        if var size = limits.socketSendBuffer.map(Int32.init) {
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let connection = HTTPConnection(
            fd: fd, sequence: nextSequence, loop: loop, headerDeadline: .now + limits.headerTimeout, sendTimeout: limits.sendTimeout,
            owner: self)
        nextSequence += 1
        connections[ObjectIdentifier(connection)] = connection
        counters.withLock { s in
            s.accepted += 1
            s.open = connections.count
        }
        connection.open()
        armSweep()
    }

    /// At the cap with every connection past its head: 503 now, then close. The answer is small
    /// enough for a fresh socket's buffer; what the client already sent is drained first, so that
    /// the close is a FIN after the answer rather than a reset.
    private func refuse(_ fd: Int32) {
        counters.withLock { $0.refused += 1 } // counted before the client can see the answer
        _ = Self.refusal.withUnsafeBufferPointer { send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        _ = shutdown(fd, Int32(SHUT_WR))
        var scratch = [UInt8](repeating: 0, count: 4096)
        var drained = 0
        while drained < 65_536 {
            let n = recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT))
            guard n > 0 else { break }
            drained += n
        }
        close(fd)
        if !warnedAtCap {
            warnedAtCap = true
            SystemCall.report(
                "ThreadKitMetrics: TKMetricsHTTPEndpoint on port \(port) has \(limits.maxConnections) connections open "
                    + "(Limits.maxConnections) and refuses more with 503 until some close; said once (docs/Metrics.md §3)")
        }
    }

    private static let refusal = HTTPResponse(503, "Service Unavailable", text: "too many connections; try again\n").bytes

    /// Closes the connections past their deadline, then sets the timer for the next deadline.
    private func sweep() {
        sweepTimer = nil
        let now = ContinuousClock.now
        for connection in Array(connections.values) where connection.deadline <= now {
            connection.close(connection.phase == .readingHead ? .headerTimeout : .sendTimeout)
        }
        armSweep()
    }

    /// One timer, due at the earliest deadline of the open connections (none when there are none).
    private func armSweep() {
        guard let loop, let earliest = connections.values.lazy.map(\.deadline).min() else { return }
        if let sweepTimer, sweepTimer.isValid, sweepTimer.fireDate <= earliest { return }
        sweepTimer?.invalidate()
        let timer = TKTimer(fireAt: earliest, interval: .zero, repeats: false) { [weak self] _ in self?.sweep() }
        timer.tolerance = .milliseconds(10)
        sweepTimer = timer
        loop.add(timer, forMode: .default)
    }

    /// Bytes of the page renderings that open connections are sending (each counted once).
    private func bytesInFlight() -> Int {
        var seen: Set<ObjectIdentifier> = []
        var bytes = 0
        for connection in connections.values {
            guard let response = connection.response, response.isPage, seen.insert(ObjectIdentifier(response)).inserted else { continue }
            bytes += response.bytes.count
        }
        return bytes
    }

    private func updateBytesInFlight() {
        let bytes = bytesInFlight()
        counters.withLock { s in
            s.bytesInFlight = bytes
            s.peakBytesInFlight = max(s.peakBytesInFlight, bytes)
        }
    }

    // MARK: Responses (loop thread)

    /// The page: the newest rendering while it is younger than the render interval, or while the
    /// renderings being sent hold `maxBytesInFlight`; else a new one.
    private func page() -> HTTPResponse {
        if let current {
            if ContinuousClock.now - current.madeAt < limits.renderInterval { return current }
            if bytesInFlight() >= limits.maxBytesInFlight {
                counters.withLock { $0.staleServed += 1 }
                return current
            }
        }
        current = nil // let go of the old rendering before making the next, when nothing sends it
        let rendering = HTTPResponse(200, "OK", body(), type: contentType, isPage: true)
        current = rendering
        counters.withLock { $0.renderings += 1 }
        return rendering
    }
}

extension TKMetricsHTTPEndpoint: HTTPConnectionOwner {
    func response(for head: [UInt8]?) -> HTTPResponse {
        guard let head else { return HTTPResponse(431, "Request Header Fields Too Large", text: "") }
        let requestLine = String(decoding: head.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return HTTPResponse(400, "Bad Request", text: "not an HTTP/1.x request line\n")
        }
        guard parts[0] == "GET" else { return HTTPResponse(405, "Method Not Allowed", text: "only GET\n") }
        let target = parts[1].split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        guard target == path else { return HTTPResponse(404, "Not Found", text: "the metrics are at \(path)\n") }
        return page()
    }

    func connectionStartedSending(_ connection: HTTPConnection) {
        updateBytesInFlight()
        armSweep()
    }

    func connectionFinishedSending(_ connection: HTTPConnection) {
        counters.withLock { $0.served += 1 }
        updateBytesInFlight()
    }

    func connectionClosed(_ connection: HTTPConnection, _ ending: HTTPConnection.Ending) {
        connections[ObjectIdentifier(connection)] = nil
        let bytes = bytesInFlight()
        counters.withLock { s in
            s.open = connections.count
            s.bytesInFlight = bytes
            switch ending {
            case .headerTimeout: s.headerTimeouts += 1
            case .sendTimeout: s.sendTimeouts += 1
            case .evicted: s.evicted += 1
            case .finished, .peerGone, .stopped: break
            }
        }
    }
}
