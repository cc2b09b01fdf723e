// TKPostgresFencedStore: a resource that checks fencing tokens (Kleppmann, "How to do distributed
// locking"): it remembers the highest token that wrote it and refuses a write with a lower one,
// so a holder that was paused (GC, swap, SIGSTOP) or cut off, and lost the lock meanwhile, cannot
// overwrite what the next holder wrote. Kept in threadkit_fenced; the check and the write are one
// statement (INSERT … ON CONFLICT DO UPDATE … WHERE token <= new token), atomic under the row lock.
// Equal tokens are accepted: one holder may write many times.
//
// Threads: calls are serialized by `callLock`; `session` is guarded by it.
#if Postgres
    import FoundationEssentials
    import PostgresNIO
    import ThreadKit

    // safety: `session` is touched only under `callLock`; the rest is immutable.
    /// A value in PostgreSQL guarded by fencing tokens: a write whose token is lower than the highest
    /// token already seen for the resource is refused.
    public final class TKPostgresFencedStore: @unchecked Sendable {
        /// The resource's name in Unicode NFC (its row in `threadkit_fenced`); guard it with the
        /// `TKPostgresLock` of the same name and write with that lock's fencing token.
        public let resource: String
        /// The server the store keeps its value on.
        public let configuration: TKPostgresConfiguration
        private let callLock = TKLock()
        private var session: PostgresSession? // guarded by `callLock`

        /// `resource` is taken in Unicode NFC, as lock names are: canonically equivalent spellings
        /// name the same resource.
        public init(resource: String, configuration: TKPostgresConfiguration) throws {
            let resource = LockSchema.normalized(resource)
            self.resource = resource
            self.configuration = configuration
            session = try PostgresSession.connect(configuration, owner: "TKPostgresFencedStore(\"\(resource)\")") {
                try LockSchema.ensureTables($0)
            }.session
        }

        deinit { session?.close() }

        /// Writes `value` if `token` is at least the highest token seen for the resource. Throws
        /// `.notLockOwner` naming both tokens when it is lower: the writer lost the lock and must stop.
        public func write(_ value: String, token: Int64) throws {
            try callLock.withLock {
                let written = try LockSchema.fencedWrite(
                    value, resource: resource, token: token, try liveSession(), what: "writing with fencing token \(token)")
                if !written {
                    let highest = try liveSession().query(
                        "SELECT token FROM threadkit_fenced WHERE resource = \(resource)", what: "reading the highest token")
                    let seen = try highest.first?.decode(Int64.self)
                    throw TKError(
                        .notLockOwner,
                        "TKPostgresFencedStore(\"\(resource)\").write: fencing token \(token) is older than "
                            + "\(seen.map(String.init) ?? "the highest") already seen; the writer lost the lock since it took it. "
                            + "Fix: stop, take the lock again, and redo the work from the current value.")
                }
            }
        }

        /// The current value and the token that wrote it; nil before the first write.
        public func read() throws -> (value: String, token: Int64)? {
            try callLock.withLock {
                let rows = try liveSession().query(
                    "SELECT value, token FROM threadkit_fenced WHERE resource = \(resource)", what: "reading")
                guard let row = rows.first else { return nil }
                let (value, token) = try row.decode((String?, Int64).self)
                return (value ?? "", token)
            }
        }

        /// Caller holds `callLock`.
        private func liveSession() throws -> PostgresSession {
            if let session, !session.isClosed { return session }
            session?.close()
            let fresh = try PostgresSession.connect(configuration, owner: "TKPostgresFencedStore(\"\(resource)\")")
            session = fresh
            return fresh
        }
    }
#endif
