// TKPostgresLock: TKDistributedLock's surface on a PostgreSQL session-level advisory lock, for
// processes on several hosts that share a database rather than a file system, with a fencing
// token per acquisition and a notification when the session holding the lock dies
// (docs/DistributedLockPostgres.md).
//
// Acquiring (tryLock / lock(before:)), on this object's own session:
//   1. connect if there is no live session (reconnecting after a server restart or a cut);
//   2. pg_try_advisory_lock(namespace, key), or pg_advisory_lock with lock_timeout set to what is
//      left before the deadline, so the server ends the wait in time (55P03 → false);
//   3. in the same session: UPDATE threadkit_locks SET token = token + 1, holder… RETURNING token.
//      Only the holder of the advisory lock runs that update, so tokens grow strictly in the order
//      of acquisitions; a session that dies between 2 and 3 releases the lock with it;
//   4. watch the session (TKPostgresLock+Liveness.swift) until unlock.
// A crashed holder's lock is released by the server when its connection drops: no stale lock.
//
// Threads: the public calls are serialized by `callLock` (held for the whole call, network waits
// included). `state` is guarded by `stateLock`, a short leaf lock also taken on the session's
// event-loop thread by the liveness checks; `stateLock` is never held across a network wait.
import FoundationEssentials
import Glibc
import PostgresNIO
import ThreadKit

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

    public let name: String
    public let configuration: TKPostgresConfiguration
    /// How often a held lock's session is checked (besides the connection's own close event).
    public let livenessInterval: Duration

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
    /// creating ThreadKit's tables on first use). Throws a `TKError` naming what to fix: a name
    /// that is empty or longer than 1024 UTF-8 bytes, an unreachable server (within the URL's
    /// connect_timeout, 5 s by default), refused credentials, TLS asked for and not offered.
    /// `onLost` runs on a private serial queue when the session holding the lock dies.
    public init(name: String, configuration: TKPostgresConfiguration, livenessInterval: Duration = .milliseconds(500),
                onLost: (@Sendable (Loss) -> Void)? = nil) throws {
        try LockSchema.validate(name)
        self.name = name
        self.configuration = configuration
        self.livenessInterval = livenessInterval
        self.onLost = onLost
        notifications = TKDispatchQueue(label: "TKPostgresLock.onLost")
        let session = try PostgresSession.connect(configuration, owner: "TKPostgresLock(\"\(name)\")")
        do {
            try LockSchema.ensureTables(session)
            key = try LockSchema.key(of: name, session)
        } catch {
            session.close()
            throw error
        }
        state.session = session
        watchClose(of: session)
    }

    /// As `init(name:configuration:…)` with the URL given, or `TK_POSTGRES_URL` when `url` is nil.
    public convenience init(name: String, url: String? = nil, livenessInterval: Duration = .milliseconds(500),
                            onLost: (@Sendable (Loss) -> Void)? = nil) throws {
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
            let session = try liveSession(until: .now + configuration.connectTimeout)
            let rows = try session.query("SELECT pg_try_advisory_lock(\(LockSchema.namespace), \(key))", what: "trying the lock")
            guard try rows.first?.decode(Bool.self) == true else { return false }
            return try recordAcquisition(session)
        }
    }

    /// Takes the lock, waiting for the holder until `deadline`; false when the deadline passed
    /// first (never early). A session lost while waiting (a server restart, a cut connection) is
    /// replaced and the wait goes on; if no server answers by the deadline it throws a `TKError`
    /// saying so.
    public func lock(before deadline: ContinuousClock.Instant) throws -> Bool {
        try callLock.withLock {
            guard try startAcquisition() else {
                throw TKError(.invalidArgument, "\(owner).lock(before:): this object already holds the lock; waiting for it "
                              + "would wait for itself. Fix: unlock() first, or use a second TKPostgresLock object.")
            }
            var lastError: TKError?
            while true {
                let now = ContinuousClock.now
                if now >= deadline, let lastError {
                    throw TKError(lastError.code, "\(owner).lock(before:): the deadline passed while the server could not be "
                                  + "reached: \(lastError.message)", errno: lastError.errno)
                }
                do {
                    let session = try liveSession(until: max(deadline, now + .milliseconds(1)))
                    let left = deadline - .now
                    if left <= .zero {
                        let rows = try session.query("SELECT pg_try_advisory_lock(\(LockSchema.namespace), \(key))", what: "trying the lock")
                        guard try rows.first?.decode(Bool.self) == true else { return false }
                        return try recordAcquisition(session)
                    }
                    // Whole milliseconds, rounded up: the server never gives up early.
                    let milliseconds = max(1, (left.components.seconds * 1000) + (left.components.attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
                    _ = try session.query("SELECT set_config('lock_timeout', \(String(milliseconds)), false)", what: "setting lock_timeout")
                    do {
                        _ = try session.query("SELECT pg_advisory_lock(\(LockSchema.namespace), \(key))", what: "waiting for the lock",
                                              until: deadline + configuration.statementTimeout)
                    } catch let error as TKError where error.message.contains("(55P03:") {
                        return false
                    }
                    return try recordAcquisition(session)
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
                throw TKError(.notLockOwner, "\(owner).unlock(): this object does not hold the lock. Fix: unlock only after a "
                              + "successful tryLock() or lock(before:), once.")
            case .lost(let hold, let error):
                throw TKError(.notLockOwner, "\(owner).unlock(): the lock (token \(hold.token)) was lost before this unlock: "
                              + "\(error.message) Fix: treat what it protected as possibly changed by another holder.")
            case .held(let hold):
                let released: Bool
                do {
                    let rows = try hold.session.query("""
                        WITH cleared AS (UPDATE threadkit_locks SET holder_pid = NULL WHERE id = \(key) AND holder_pid = pg_backend_pid() RETURNING 1)
                        SELECT pg_advisory_unlock(\(LockSchema.namespace), \(key))
                        """, what: "releasing the lock")
                    released = try rows.first?.decode(Bool.self) == true
                } catch let error as TKError where Self.isConnectionFailure(error) {
                    dropSession()
                    throw TKError(.notLockOwner, "\(owner).unlock(): the session holding the lock (token \(hold.token)) was lost "
                                  + "before the unlock reached the server: \(error.message) Fix: treat what it protected as possibly "
                                  + "changed by another holder.")
                }
                if !released {
                    throw TKError(.notLockOwner, "\(owner).unlock(): the server says this session did not hold the lock (token "
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
                throw TKError(.notLockOwner, "\(owner): the lock (token \(hold.token)) was lost and never unlocked: \(error.message) "
                              + "Fix: call unlock() (it reports the loss) before taking the lock again.")
            }
        }
    }

    /// Step 3: the fencing token, recorded in the same session that now holds the advisory lock.
    /// Caller holds `callLock`.
    private func recordAcquisition(_ session: PostgresSession) throws -> Bool {
        let holder = "\(Self.hostName) pid \(getpid())"
        let rows = try session.query("""
            UPDATE threadkit_locks SET token = token + 1, holder_pid = pg_backend_pid(), holder = \(holder), acquired_at = clock_timestamp()
            WHERE id = \(key) RETURNING token, acquired_at
            """, what: "recording the fencing token")
        guard let (token, date) = try rows.first?.decode((Int64, Date).self) else {
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
