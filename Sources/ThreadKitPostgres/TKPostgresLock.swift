// TKPostgresLock: TKDistributedLock's surface on a PostgreSQL session-level advisory lock, for
// processes on several hosts that share a database rather than a file system, with a fencing
// token per acquisition and a notification when the session holding the lock dies
// (docs/DistributedLockPostgres.md).
//
// Acquiring (tryLock / lock(before:)), on this object's own session:
//   1. connect if there is no live session (reconnecting after a server restart or a cut);
//   2. pg_try_advisory_lock(namespace, key), or pg_advisory_lock with lock_timeout set to what is
//      left before the deadline, so the server ends the wait in time (55P03 → false). A deadline
//      further away than `waitSlice` (1 hour) is waited for in slices of at most that, each
//      re-checking the deadline: lock_timeout cannot exceed INT_MAX ms (24.8 days), and a slice
//      bounds how long a silently dead connection goes unnoticed during a wait;
//   3. in the same session: UPDATE threadkit_locks SET token = token + 1, holder… RETURNING token.
//      Only the holder of the advisory lock runs that update, so tokens grow strictly in the order
//      of acquisitions; a session that dies between 2 and 3 releases the lock with it;
//   4. watch the session (TKPostgresLock+Liveness.swift) until unlock.
// Invariant: once step 2 was granted, the call either returns true with the hold recorded in
// `state`, or gives the advisory lock back before it throws (`abandonAcquisition`: unlock on the
// session, or close the session when it cannot answer) — never a lock that the server grants to
// this session while `isHeld` says false, which nobody could unlock. "Granted" includes a grant
// statement that failed after granting (`holdsLock` asks pg_locks whenever one fails).
// Release writes nothing: the row is written only by step 3, which commits before the call
// returns, so the next holder never waits for a row lock of ours (an UPDATE at release would keep
// its row lock past pg_advisory_unlock until its commit, which group commit delays: the next
// holder's step 3 then waited for it under the lock_timeout its wait had left, and failed 55P03).
// A crashed holder's lock is released by the server when its connection drops: no stale lock.
//
// Threads: the public calls are serialized by `callLock` (held for the whole call, network waits
// included); `acquisitionFault` and `waitSlice` (test hooks) are guarded by it too. `state` is
// guarded by `stateLock`, a short leaf lock also taken on the session's
// event-loop thread by the liveness checks; `stateLock` is never held across a network wait.
#if Postgres
    import FoundationEssentials
    import Glibc
    import PostgresNIO
    import ThreadKit

    // safety: `state` is touched only under `stateLock`; the session and the test hooks only
    // under `callLock`; the rest is immutable.
    /// A lock shared by processes on any hosts that reach one PostgreSQL database. Session-level
    /// advisory lock, so a holder that crashes releases it when its connection drops; each
    /// acquisition gets a fencing token larger than every earlier one; `onLost` is called when the
    /// session holding the lock dies (server restart, connection cut, pg_terminate_backend).
    public final class TKPostgresLock: @unchecked Sendable {
        /// Why a held lock was lost, delivered to `onLost`.
        public struct Loss: Sendable {
            /// The fencing token of the acquisition that was lost.
            public let token: Int64
            /// What happened, with the server's words where it gave any.
            public let error: TKError
        }

        /// The lock's name in Unicode NFC: spellings that are canonically equivalent (precomposed or
        /// decomposed accents) name the same lock.
        public let name: String
        /// The server whose session-level advisory lock implements this lock (this object keeps one
        /// session to it, reconnecting when it is lost).
        public let configuration: TKPostgresConfiguration
        /// How often a held lock's session is checked (besides the connection's own close event).
        /// From `minimumLivenessInterval` to `maximumLivenessInterval`.
        public let livenessInterval: Duration

        /// The shortest `livenessInterval` accepted: a check needs a round trip to the server, and one
        /// unanswered for 3 intervals declares the hold lost, so shorter intervals declare healthy
        /// holds lost whenever the server or this process is briefly slow (50 ms: a hold is declared
        /// lost after 150 ms without an answer).
        public static let minimumLivenessInterval: Duration = .milliseconds(50)
        /// The longest `livenessInterval` accepted (a day): beyond it the check never runs in practice.
        public static let maximumLivenessInterval: Duration = .seconds(86_400)

        /// Where an acquisition can fail after the server granted the advisory lock, for the fault
        /// hook. In order: the grant statement's answer (an error although the server granted the
        /// lock: lock_timeout firing as it was granted); before the token UPDATE is sent (the server
        /// refuses it: a lock_timeout on the row, 55P03); after the server answered it, i.e. committed
        /// (the answer lost or the commit refused); while reading the answer and recording the hold.
        enum AcquisitionStep: Sendable, CaseIterable {
            case grant, tokenUpdate, commit, holderRecord
        }
        /// Test hook: called at each `AcquisitionStep`; what it throws is what the step failed with.
        /// nil (one load under `callLock`) in production. Guarded by `callLock`.
        var acquisitionFault: (@Sendable (AcquisitionStep) throws -> Void)?
        /// The longest single server-side wait in `lock(before:)`. Guarded by `callLock`; only tests
        /// change it (to cross slice boundaries in seconds).
        var waitSlice: Duration = .seconds(3600)

        /// What one acquisition holds. Immutable.
        struct Hold {
            let token: Int64
            let acquiredAt: Date
            let session: PostgresSession
            /// Identifies this acquisition for the liveness callbacks that outlive it.
            let generation: UInt64
        }
        enum Holding {
            case idle
            case held(Hold)
            case lost(Hold, TKError)
        }
        /// Guarded by `stateLock`: the holding, the live session (nil before the first connection or
        /// after it was found closed), the key, and the acquisition counter.
        struct State {
            var holding: Holding = .idle
            var session: PostgresSession?
            var generation: UInt64 = 0
            var liveness: RepeatedTask?
            var checkInFlightSince: ContinuousClock.Instant?
        }
        let stateLock = TKLock()
        var state = State()
        /// Serializes the public calls. Held across network waits; taken before `stateLock`.
        let callLock = TKLock()
        /// The lock's advisory key; immutable after init.
        let key: Int32
        /// Where `onLost` runs, one loss at a time.
        let notifications: TKDispatchQueue
        let onLost: (@Sendable (Loss) -> Void)?

        /// Creates the lock `name` in the database of `configuration`, connecting at once (and
        /// creating ThreadKit's tables on first use). The name is taken in Unicode NFC, so canonically
        /// equivalent spellings are one lock. Throws a `TKError` naming what to fix: a name that is
        /// empty or longer than 1024 UTF-8 bytes (in NFC), a `livenessInterval` outside 50 ms…1 day,
        /// an unreachable server (within the URL's connect_timeout, 5 s by default), refused
        /// credentials, TLS asked for and not offered. `onLost` runs on a private serial queue when
        /// the session holding the lock dies.
        public init(
            name: String, configuration: TKPostgresConfiguration, livenessInterval: Duration = .milliseconds(500),
            onLost: (@Sendable (Loss) -> Void)? = nil
        ) throws {
            let name = LockSchema.normalized(name)
            try LockSchema.validate(name)
            guard livenessInterval >= Self.minimumLivenessInterval && livenessInterval <= Self.maximumLivenessInterval else {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresLock(name: \"\(name.prefix(32))\", livenessInterval: \(livenessInterval)): the interval "
                        + "is outside \(Self.minimumLivenessInterval)…\(Self.maximumLivenessInterval). Each check is a round trip to the "
                        + "server and 3 unanswered intervals declare the lock lost, so a shorter interval reports healthy holds lost. "
                        + "Fix: use at least 50 ms and at most a day (the default is 500 ms).")
            }
            self.name = name
            self.configuration = configuration
            self.livenessInterval = livenessInterval
            self.onLost = onLost
            notifications = TKDispatchQueue(label: "TKPostgresLock.onLost")
            let (session, key) = try PostgresSession.connect(configuration, owner: "TKPostgresLock(\"\(name)\")") {
                try LockSchema.ensureTables($0)
                return try LockSchema.key(of: name, $0)
            }
            self.key = key
            state.session = session
            watchClose(of: session)
        }

        /// As `init(name:configuration:…)` with the URL given, or `TK_POSTGRES_URL` when `url` is nil.
        public convenience init(
            name: String, url: String? = nil, livenessInterval: Duration = .milliseconds(500),
            onLost: (@Sendable (Loss) -> Void)? = nil
        ) throws {
            let configuration = try url.map { try TKPostgresConfiguration(url: $0) } ?? TKPostgresConfiguration.fromEnvironment()
            try self.init(name: name, configuration: configuration, livenessInterval: livenessInterval, onLost: onLost)
        }

        deinit {
            state.liveness?.cancel()
            state.session?.close()
        }

        var owner: String { "TKPostgresLock(\"\(name)\")" }

        /// Takes the lock if nobody holds it; never waits for the holder (only for the server's
        /// answer). False when it is held, including by this object. Throws when the server cannot be
        /// reached or refuses.
        public func tryLock() throws -> Bool {
            try callLock.withLock {
                guard try startAcquisition() else { return false }
                let session = try liveSession(until: DeadlineArithmetic.instant(configuration.connectTimeout))
                return try tryGrant(session)
            }
        }

        /// Takes the lock, waiting for the holder until `deadline`; false when the deadline passed
        /// first (never early). Any deadline is accepted: one further than PostgreSQL's longest
        /// lock_timeout (24.8 days), up to `.now + .seconds(Int64.max)`, means "as long as it takes"
        /// and is waited for in slices. A session lost while waiting (a server restart, a cut
        /// connection) is replaced and the wait goes on; if no server answers by the deadline it
        /// throws a `TKError` saying so.
        public func lock(before deadline: ContinuousClock.Instant) throws -> Bool {
            try callLock.withLock {
                guard try startAcquisition() else {
                    throw TKError(
                        .invalidArgument,
                        "\(owner).lock(before:): this object already holds the lock; waiting for it "
                            + "would wait for itself. Fix: unlock() first, or use a second TKPostgresLock object.")
                }
                var lastError: TKError?
                while true {
                    let now = ContinuousClock.now
                    if now >= deadline, let lastError {
                        throw TKError(
                            lastError.code,
                            "\(owner).lock(before:): the deadline passed while the server could not be "
                                + "reached: \(lastError.message)", errno: lastError.errno)
                    }
                    do {
                        let session = try liveSession(until: max(deadline, now + .milliseconds(1)))
                        let sliceStart = ContinuousClock.now
                        let left = deadline - sliceStart
                        if left <= .zero { return try tryGrant(session) }
                        // This slice's wait, in whole milliseconds rounded up: the server never gives up
                        // early. At most `waitSlice`, so far below lock_timeout's INT_MAX ms.
                        let slice = min(left, waitSlice)
                        let milliseconds = max(1, DeadlineArithmetic.millisecondsRoundedUp(slice))
                        _ = try session.query(
                            "SELECT set_config('lock_timeout', \(String(milliseconds)), false)", what: "setting lock_timeout")
                        do {
                            _ = try session.query(
                                "SELECT pg_advisory_lock(\(LockSchema.namespace), \(key))", what: "waiting for the lock",
                                until: DeadlineArithmetic.instant(configuration.statementTimeout, after: sliceStart + slice))
                            try acquisitionFault?(.grant)
                        } catch let error as TKError where !Self.isConnectionFailure(error) {
                            if try completeAcquisition(session, granted: { try holdsLock(session) }) { return true }
                            guard error.message.contains("(55P03:") else { throw error }
                            if ContinuousClock.now >= deadline { return false }
                            continue // a slice ended before the deadline: wait again
                        }
                        return try completeAcquisition(session) { true }
                    } catch let error as TKError where Self.isConnectionFailure(error) {
                        lastError = error
                        dropSession()
                        if ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(50)) }
                    }
                }
            }
        }

        /// Releases the lock. Throws `.notLockOwner` when this object does not hold it, or when it
        /// was lost since it was taken (the session died, or someone broke it): then the protected
        /// resource may have been changed by another holder.
        public func unlock() throws {
            try callLock.withLock {
                let holding = stateLock.withLock { () -> Holding in
                    let current = state.holding
                    state.holding = .idle
                    state.liveness?.cancel()
                    state.liveness = nil
                    return current
                }
                switch holding {
                case .idle:
                    throw TKError(
                        .notLockOwner,
                        "\(owner).unlock(): this object does not hold the lock. Fix: unlock only after a "
                            + "successful tryLock() or lock(before:), once.")
                case .lost(let hold, let error):
                    throw TKError(
                        .notLockOwner,
                        "\(owner).unlock(): the lock (token \(hold.token)) was lost before this unlock: "
                            + "\(error.message) Fix: treat what it protected as possibly changed by another holder.")
                case .held(let hold):
                    let released: Bool
                    do {
                        // Only the advisory lock: see the header for why release writes no row.
                        let rows = try hold.session.query(
                            "SELECT pg_advisory_unlock(\(LockSchema.namespace), \(key))",
                            what: "releasing the lock")
                        released = try rows.first?.decode(Bool.self) == true
                    } catch let error as TKError where Self.isConnectionFailure(error) {
                        dropSession()
                        throw TKError(
                            .notLockOwner,
                            "\(owner).unlock(): the session holding the lock (token \(hold.token)) was lost "
                                + "before the unlock reached the server: \(error.message) Fix: treat what it protected as possibly "
                                + "changed by another holder.")
                    }
                    if !released {
                        throw TKError(
                            .notLockOwner,
                            "\(owner).unlock(): the server says this session did not hold the lock (token "
                                + "\(hold.token)). Fix: treat what it protected as possibly changed by another holder.")
                    }
                }
            }
        }

        /// The fencing token of the current acquisition, nil when this object does not hold the lock.
        /// Pass it with every write to the protected resource; the resource refuses tokens lower than
        /// the highest it has seen (TKPostgresFencedStore does).
        public var fencingToken: Int64? {
            stateLock.withLock {
                if case .held(let hold) = state.holding { return hold.token }
                return nil
            }
        }

        /// Whether this object holds the lock as far as it knows (false once a loss was detected).
        public var isHeld: Bool { fencingToken != nil }

        /// Why the lock was lost, after a loss and until `unlock()` acknowledges it.
        public var lossError: TKError? {
            stateLock.withLock {
                if case .lost(_, let error) = state.holding { return error }
                return nil
            }
        }

        /// Test hook: `fault` runs at each `AcquisitionStep` of every later acquisition (nil: none).
        func injectAcquisitionFault(_ fault: (@Sendable (AcquisitionStep) throws -> Void)?) {
            callLock.withLock { acquisitionFault = fault }
        }

        /// Test hook: the longest single server-side wait of `lock(before:)` (1 hour by default).
        func setWaitSlice(_ slice: Duration) {
            precondition(slice >= .milliseconds(1), "TKPostgresLock.setWaitSlice: a slice must be at least 1 ms")
            callLock.withLock { waitSlice = slice }
        }

        /// Before an acquisition: false when this object already holds the lock; throws (and forgets
        /// it) when it was lost and not yet acknowledged by unlock(), which is what the caller must
        /// hear first. Caller holds `callLock`.
        private func startAcquisition() throws -> Bool {
            try stateLock.withLock {
                switch state.holding {
                case .idle: return true
                case .held: return false
                case .lost(let hold, let error):
                    state.holding = .idle
                    throw TKError(
                        .notLockOwner,
                        "\(owner): the lock (token \(hold.token)) was lost and never unlocked: \(error.message) "
                            + "Fix: call unlock() (it reports the loss) before taking the lock again.")
                }
            }
        }

        /// Step 2 without waiting, then step 3 if granted. Caller holds `callLock`.
        private func tryGrant(_ session: PostgresSession) throws -> Bool {
            let rows: [PostgresRow]
            do {
                rows = try session.query("SELECT pg_try_advisory_lock(\(LockSchema.namespace), \(key))", what: "trying the lock")
                try acquisitionFault?(.grant)
            } catch let error as TKError where Self.isConnectionFailure(error) {
                dropSession() // it may hold the lock: closing releases it (lock(before:)'s retry does the same)
                throw error
            } catch let error as TKError {
                if try completeAcquisition(session, granted: { try holdsLock(session) }) { return true }
                throw error
            }
            return try completeAcquisition(session) { try rows.first?.decode(Bool.self) == true }
        }

        /// Whether `session` holds the advisory lock, from pg_locks: asked when a grant statement
        /// failed without losing the connection. PostgreSQL can fail the statement after granting a
        /// session-level lock — when lock_timeout fires just as the lock is granted, the cancel is
        /// already pending and pg_advisory_lock reports 55P03 while the session holds the lock (seen
        /// with contenders whose deadlines are a few milliseconds away). Caller holds `callLock`.
        private func holdsLock(_ session: PostgresSession) throws -> Bool {
            let rows = try session.query(
                """
                SELECT count(*) FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory'
                AND l.classid = \(Int64(UInt32(bitPattern: LockSchema.namespace)))::oid AND l.objid = \(Int64(key))::oid AND l.objsubid = 2 AND l.granted
                """, what: "asking whether the session holds the lock")
            return try (rows.first?.decode(Int64.self) ?? 0) > 0
        }

        /// After the grant statement of step 2 answered on `session`: whether it granted the lock
        /// (`granted`), and if so step 3. Any failure from here on gives the lock back before it is
        /// thrown (the header's invariant). Caller holds `callLock`.
        private func completeAcquisition(_ session: PostgresSession, granted: () throws -> Bool) throws -> Bool {
            do {
                do {
                    guard try granted() else { return false }
                    return try recordAcquisition(session)
                } catch let error as TKError {
                    throw error
                } catch {
                    throw TKError(.protocolViolation, "\(owner): the server's answer while taking the lock could not be read: \(error).")
                }
            } catch let error as TKError {
                throw abandonAcquisition(session, after: error)
            }
        }

        /// Step 3: the fencing token, recorded in the same session that now holds the advisory lock.
        /// Caller holds `callLock`.
        private func recordAcquisition(_ session: PostgresSession) throws -> Bool {
            let holder = "\(Self.hostName) pid \(getpid())"
            let fault = acquisitionFault
            try fault?(.tokenUpdate)
            let rows = try session.query(
                """
                UPDATE threadkit_locks SET token = token + 1, holder_pid = pg_backend_pid(), holder = \(holder), acquired_at = clock_timestamp()
                WHERE id = \(key) RETURNING token, acquired_at
                """, what: "recording the fencing token")
            try fault?(.commit)
            try fault?(.holderRecord)
            let decoded: (Int64, Date)?
            do {
                decoded = try rows.first?.decode((Int64, Date).self)
            } catch {
                throw TKError(
                    .protocolViolation, "\(owner): the server's answer to recording the fencing token could not be read: \(error).")
            }
            guard let (token, date) = decoded else {
                throw TKError(.protocolViolation, "\(owner): the lock's row is missing from threadkit_locks. Fix: do not delete its rows.")
            }
            let generation = stateLock.withLock { () -> UInt64 in
                state.generation &+= 1
                state.holding = .held(Hold(token: token, acquiredAt: date, session: session, generation: state.generation))
                return state.generation
            }
            watch(session, generation: generation)
            return true
        }

        /// A failure after the advisory lock was (or may have been) granted on `session`: gives it
        /// back, and returns the error to throw, which says so. pg_advisory_unlock on the session when
        /// the failure was a refused statement (the session still answers); otherwise, or when that
        /// unlock fails too, the session is closed — the server releases every lock of a session that
        /// ends (when it sees the connection close). A `.systemCall` error stays one, so that
        /// `lock(before:)` reconnects and waits again within its deadline. Caller holds `callLock`.
        private func abandonAcquisition(_ session: PostgresSession, after error: TKError) -> TKError {
            var released = false
            var how = "the lock was given back by closing the session"
            if !Self.isConnectionFailure(error) && !session.isClosed {
                do {
                    let rows = try session.query(
                        "SELECT pg_advisory_unlock(\(LockSchema.namespace), \(key))",
                        what: "giving back the lock after a failed acquisition")
                    // false: the session did not hold it (the grant's own answer was unreadable).
                    _ = try rows.first?.decode(Bool.self)
                    released = true
                    how = "the lock was released"
                } catch {
                    how += " (releasing it failed too: \(error))"
                }
            }
            if !released {
                if stateLock.withLock({ state.session === session }) { dropSession() } else { session.close() }
            }
            let fix =
                error.message.contains("(55P03:")
                ? " Fix: another session keeps threadkit_locks' row for this name locked (a long transaction that touched it); end it."
                : (Self.isConnectionFailure(error) ? "" : " Fix: retry; if it persists, check the server's log.")
            return TKError(
                error.code,
                "\(error.message) The server had granted the lock; \(how), so nobody holds it "
                    + "and this object does not.\(fix)", errno: error.errno)
        }

        /// The live session, connecting a new one when there is none. Caller holds `callLock`.
        func liveSession(until deadline: ContinuousClock.Instant) throws -> PostgresSession {
            if let session = stateLock.withLock({ state.session }), !session.isClosed { return session }
            dropSession()
            let session = try PostgresSession.connect(configuration, owner: owner, deadline: deadline)
            stateLock.withLock { state.session = session }
            watchClose(of: session)
            return session
        }

        /// Forgets (and closes) the current session.
        func dropSession() {
            let old = stateLock.withLock { () -> PostgresSession? in
                defer { state.session = nil }
                return state.session
            }
            old?.close()
        }

        /// Whether `error` means the session is gone (rather than a refused statement).
        static func isConnectionFailure(_ error: TKError) -> Bool {
            error.code == .systemCall
        }

        static let hostName: String = {
            var buffer = [CChar](repeating: 0, count: 256)
            guard gethostname(&buffer, buffer.count - 1) == 0 else { return "unknown-host" }
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }()
    }
#endif
