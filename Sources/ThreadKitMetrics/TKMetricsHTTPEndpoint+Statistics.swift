// TKMetricsHTTPEndpoint.Statistics: what an endpoint has done with its connections, counted on its
// loop thread and read from any thread (`TKMetricsHTTPEndpoint.statistics`, under the endpoint's
// `counters` mutex). A plain value.

extension TKMetricsHTTPEndpoint {
    /// Counts of what the endpoint did with its connections since it started.
    public struct Statistics: Sendable, Equatable {
        /// Connections accepted and kept (refused ones are not counted here).
        public var accepted = 0
        /// Connections open now.
        public var open = 0
        /// Responses handed to the kernel whole (any status).
        public var served = 0
        /// Times the body closure ran (one rendering of the page each).
        public var renderings = 0
        /// Connections answered 503 and closed at once because ``Limits/maxConnections`` were
        /// open and all of them had sent their request.
        public var refused = 0
        /// Connections still waiting for their request head that were closed to make room for a
        /// new one at ``Limits/maxConnections``.
        public var evicted = 0
        /// Connections closed because their request head had not arrived within
        /// ``Limits/headerTimeout``.
        public var headerTimeouts = 0
        /// Connections reset because their client had not read the response within
        /// ``Limits/sendTimeout``.
        public var sendTimeouts = 0
        /// Page requests answered with an older rendering because the renderings being sent held
        /// ``Limits/maxBytesInFlight``.
        public var staleServed = 0
        /// Bytes of page renderings that open connections are sending now (each rendering counted
        /// once, however many connections send it).
        public var bytesInFlight = 0
        /// The most ``bytesInFlight`` has been.
        public var peakBytesInFlight = 0
    }
}
