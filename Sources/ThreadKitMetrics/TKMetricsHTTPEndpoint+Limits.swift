// TKMetricsHTTPEndpoint.Limits: what one TKMetricsHTTPEndpoint lets its clients hold — connections,
// bytes of the page being sent, time to send a request and to take the answer — and how often it
// renders the page (docs/Metrics.md §3, "Limits"). An immutable value: checked by the endpoint's
// init, then read on its loop thread.
import ThreadKit

extension TKMetricsHTTPEndpoint {
    /// The bounds an endpoint keeps whatever its clients do. The defaults suit a Prometheus server
    /// or two scraping every few seconds; every limit is a number a hostile local user cannot
    /// push past.
    public struct Limits: Sendable, Equatable {
        /// The most connections open at once (default 64). At the cap, the request heads already
        /// received are read first; then a new connection closes the oldest one still without a
        /// whole head (counted in ``Statistics/evicted``), or, if every open connection has sent
        /// its request, is answered `503 Service Unavailable` and closed at once (counted in
        /// ``Statistics/refused``; the first refusal is reported on standard error).
        public var maxConnections: Int
        /// How long a client has, from the moment its connection is accepted, to send the whole
        /// request head (default 10 s). A connection that has not is closed (counted in
        /// ``Statistics/headerTimeouts``): bytes trickled in slowly do not extend it.
        public var headerTimeout: Duration
        /// How long a client has, from the moment its response starts, to read the whole of it
        /// (default 30 s). A client that has not is reset (counted in ``Statistics/sendTimeouts``),
        /// which also frees what the kernel still buffered for it.
        public var sendTimeout: Duration
        /// Requests within this time of the newest rendering of the page share it (default 1 s):
        /// the body closure runs at most once per interval, and every connection sends the same
        /// immutable bytes, referenced, not copied.
        public var renderInterval: Duration
        /// The most bytes of page renderings that connections still being sent may hold before a
        /// new rendering is made (default 64 MiB). Past it, a request gets the newest rendering
        /// already held, however old (counted in ``Statistics/staleServed``), until slow clients
        /// finish or are reset at ``sendTimeout``. What the renderings hold stays under this plus
        /// two pages.
        public var maxBytesInFlight: Int
        /// The kernel send buffer of each connection, in bytes (`SO_SNDBUF`, default 256 KiB; the
        /// kernel doubles it for its bookkeeping); nil keeps the kernel's own, which grows to
        /// `net.ipv4.tcp_wmem`'s maximum (4 MiB by default) for a client that does not read.
        public var socketSendBuffer: Int?

        /// Limits with the defaults, changed where given.
        public init(
            maxConnections: Int = 64, headerTimeout: Duration = .seconds(10), sendTimeout: Duration = .seconds(30),
            renderInterval: Duration = .seconds(1), maxBytesInFlight: Int = 64 << 20, socketSendBuffer: Int? = 256 << 10
        ) {
            (self.maxConnections, self.headerTimeout, self.sendTimeout) = (maxConnections, headerTimeout, sendTimeout)
            (self.renderInterval, self.maxBytesInFlight, self.socketSendBuffer) = (renderInterval, maxBytesInFlight, socketSendBuffer)
        }

        /// Throws `TKError(.invalidArgument)` naming the first limit out of range.
        func validate() throws(TKError) {
            func refuse(_ what: String) -> TKError {
                TKError(.invalidArgument, "TKMetricsHTTPEndpoint.Limits: \(what). Fix: pass a value in range, or leave the default.")
            }
            guard maxConnections >= 1 else { throw refuse("maxConnections is \(maxConnections); it must be 1 or more") }
            guard headerTimeout > .zero else { throw refuse("headerTimeout is \(headerTimeout); it must be positive") }
            guard sendTimeout > .zero else { throw refuse("sendTimeout is \(sendTimeout); it must be positive") }
            guard renderInterval >= .zero else { throw refuse("renderInterval is \(renderInterval); it must be 0 or more") }
            guard maxBytesInFlight >= 1 else { throw refuse("maxBytesInFlight is \(maxBytesInFlight); it must be 1 or more") }
            if let socketSendBuffer, socketSendBuffer < 4096 || socketSendBuffer > Int(Int32.max) / 2 {
                throw refuse("socketSendBuffer is \(socketSendBuffer); it must be from 4096 to \(Int(Int32.max) / 2), or nil")
            }
        }
    }
}
