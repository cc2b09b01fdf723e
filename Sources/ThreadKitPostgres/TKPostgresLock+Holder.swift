// TKPostgresLock+Holder: who holds the lock (pg_locks joined with threadkit_locks), `lockDate`,
// and `breakLock()`, which ends the holder's session with pg_terminate_backend. All run on this
// object's session under `callLock`, like every public call.
#if Postgres
    import FoundationEssentials
    import PostgresNIO
    import ThreadKit

    extension TKPostgresLock {
        /// Who holds a lock.
        public struct Holder: Sendable, Equatable {
            /// The server process of the holding session (pg_backend_pid() there).
            public let serverPID: Int32
            /// The holding client as it described itself ("host pid N"), when it recorded its
            /// acquisition; nil when the session holds the advisory lock but died or was cut off
            /// before recording it. (Release writes nothing, so in the moment between a session's
            /// re-acquisition and its recording, this describes that session's previous acquisition.)
            public let client: String?
            /// When it acquired the lock (the server's clock), nil as for `client`.
            public let date: Date?
            /// Its fencing token, nil as for `client`.
            public let token: Int64?
        }

        /// Who holds the lock now, nil when nobody does. Throws when the server cannot be reached.
        public func currentHolder() throws -> Holder? {
            try callLock.withLock { try holderLocked() }
        }

        /// When the current holder took the lock (the server's clock), nil when nobody holds it or
        /// the server cannot be reached (NSDistributedLock's lockDate).
        public var lockDate: Date? {
            (try? currentHolder())?.date
        }

        /// Ends the holder's session (pg_terminate_backend), which releases the lock and tells the
        /// holder, through its `onLost`, that it lost it. Returns whose lock it was, nil when nobody
        /// held it. Needs the right to signal that session: the same database role, or membership in
        /// pg_signal_backend (`.invalidArgument` says so otherwise). Breaking a lock this object holds
        /// ends this object's own session.
        @discardableResult
        public func breakLock() throws -> Holder? {
            try callLock.withLock {
                guard let holder = try holderLocked() else { return nil }
                let session = try liveSession(until: DeadlineArithmetic.instant(configuration.connectTimeout))
                let rows: [PostgresRow]
                do {
                    rows = try session.query("SELECT pg_terminate_backend(\(holder.serverPID))", what: "ending the holder's session")
                } catch let error as TKError where error.message.contains("(42501:") {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).breakLock(): the server refused to end the holder's session (server pid "
                            + "\(holder.serverPID)): \(error.message) Fix: connect as the holder's role, or GRANT pg_signal_backend to this role."
                    )
                } catch let error as TKError where Self.isConnectionFailure(error) && holder.serverPID == session.backendPID {
                    return holder // it was this object's own session
                }
                guard try rows.first?.decode(Bool.self) == true else {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).breakLock(): pg_terminate_backend(\(holder.serverPID)) did not end the "
                            + "holder's session. Fix: connect as the holder's role, or GRANT pg_signal_backend to this role.")
                }
                return holder
            }
        }

        /// The holder, from pg_locks (the truth) joined with what it recorded. Caller holds `callLock`.
        private func holderLocked() throws -> Holder? {
            let session = try liveSession(until: DeadlineArithmetic.instant(configuration.connectTimeout))
            let sql =
                "SELECT l.pid, t.holder_pid, t.holder, t.acquired_at, t.token FROM pg_locks l JOIN threadkit_locks t "
                + "ON t.id = $1 WHERE " + LockSchema.grantedCondition(key: "t.id")
            var binds = PostgresBindings()
            binds.append(key)
            let rows = try session.query(PostgresQuery(unsafeSQL: sql, binds: binds), what: "looking for the lock's holder")
            guard let row = rows.first else { return nil }
            let (pid, recordedPID, client, date, token) = try row.decode((Int32, Int32?, String?, Date?, Int64).self)
            guard recordedPID == pid else { return Holder(serverPID: pid, client: nil, date: nil, token: nil) }
            return Holder(serverPID: pid, client: client, date: date, token: token)
        }
    }
#endif
