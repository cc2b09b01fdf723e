// TKPostgresOperationOutcome: how an operation of a TKPostgresOperationQueue ended, as any host
// reads it from the database. Immutable value.
#if Postgres
    /// How an operation ended.
    public struct TKPostgresOperationOutcome: Sendable, Equatable {
        /// The terminal states.
        public enum State: String, Sendable, Equatable {
            /// Its handler returned.
            case finished
            /// It was cancelled before it ran, or its handler threw after a cancel was requested.
            case cancelled
            /// Its attempts were spent (the handler threw, or its workers stopped renewing the lease).
            case dead

            /// The state whose raw value (its spelling in threadkit_ops.state) is `rawValue`:
            /// "finished", "cancelled" or "dead"; nil for the states that are not terminal. Written out
            /// for its documentation; it is what the compiler would synthesize.
            public init?(rawValue: String) {
                switch rawValue {
                case "finished": self = .finished
                case "cancelled": self = .cancelled
                case "dead": self = .dead
                default: return nil
                }
            }
        }

        /// The operation's id.
        public let id: Int64
        /// How it ended.
        public let state: State
        /// The last error of a failed run (the handler's, or why the lease expired); nil if none failed.
        public let lastError: String?
        /// How many runs it took (0 when it was cancelled before it ran).
        public let attempts: Int
        /// The fencing token of its last run (0 when it never ran).
        public let token: Int64
    }
#endif
