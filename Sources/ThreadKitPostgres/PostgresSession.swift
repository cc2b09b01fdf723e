// PostgresSession: one PostgreSQL connection (one server session) used from blocking code.
// Every call starts a postgres-nio future and parks the calling thread on a TKDispatchSemaphore
// (ThreadKit's futex parking) until the future completes or the caller's deadline passes. NIO's
// own `EventLoopFuture.wait()` is not used: it parks on a pthread condition variable
// (NIOConcurrencyHelpers.ConditionLock) and traps when called on an event-loop thread.
//
// A call that outlives its deadline closes the connection: postgres-nio cannot withdraw a query
// it has sent, and a session whose reply is still owed cannot be reused. Server-side waits
// (pg_advisory_lock) are bounded by `lock_timeout` instead, so the server answers first.
//
// Thread-safety: `connection` is immutable; the connection queues concurrent queries itself.
// `closed` is set once, by the close future's callback on the connection's event loop, under
// `state`'s lock.
#if Postgres
    import FoundationEssentials
    import Logging
    import PostgresNIO
    import ThreadKit

    // safety: `closedFlag` is touched only under `stateLock`; the connection is thread-safe; the
    // rest is immutable.
    final class PostgresSession: @unchecked Sendable {
        let connection: PostgresConnection
        /// What the session is for, for error messages ("TKPostgresLock(\"orders\")").
        let owner: String
        let configuration: TKPostgresConfiguration
        /// The server's process id of this session (pg_backend_pid()).
        let backendPID: Int32
        /// Set when `close()` is called or the connection has closed (by the server or the network).
        /// Guarded by `stateLock`.
        private var closedFlag = false
        private let stateLock = TKLock()

        static let logger: Logger = Logger(label: "ThreadKitPostgres", factory: { _ in SwiftLogNoOpLogHandler() })

        private init(connection: PostgresConnection, owner: String, configuration: TKPostgresConfiguration, backendPID: Int32) {
            self.connection = connection
            self.owner = owner
            self.configuration = configuration
            self.backendPID = backendPID
            connection.closeFuture.whenComplete { [weak self] _ in
                guard let self else { return }
                self.stateLock.withLock { self.closedFlag = true }
            }
        }

        var isClosed: Bool { stateLock.withLock { closedFlag } || connection.isClosed }

        /// Connects, giving up at `deadline` (bounded as well by the URL's connect_timeout).
        static func connect(
            _ configuration: TKPostgresConfiguration, owner: String,
            deadline: ContinuousClock.Instant? = nil
        ) throws -> PostgresSession {
            var nioConfiguration = try configuration.nioConfiguration(owner: owner)
            // Saturating: connectTimeout is a public var, and a deadline may be any instant.
            let timeout = min(max(configuration.connectTimeout, .milliseconds(1)), DeadlineArithmetic.longest)
            let limit = deadline.map { min(timeout, max(.milliseconds(1), $0 - .now)) } ?? timeout
            nioConfiguration.options.connectTimeout = .nanoseconds(DeadlineArithmetic.nanoseconds(limit))
            let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
            let future = PostgresConnection.connect(on: eventLoop, configuration: nioConfiguration, id: nextID(), logger: logger)
            // The server may take a moment beyond the TCP connect to authenticate: allow it, bounded.
            let connection: PostgresConnection
            do {
                connection = try block(
                    on: future, until: DeadlineArithmetic.instant(limit + .seconds(5)), owner: owner,
                    what: "connecting to \(configuration.serverDescription)")
            } catch let error as TKError {
                throw error
            } catch {
                throw configuration.connectError(error, owner: owner)
            }
            do {
                let pidFuture = connection.query("SELECT pg_backend_pid()", logger: logger)
                let rows = try block(
                    on: pidFuture, until: DeadlineArithmetic.instant(configuration.connectTimeout), owner: owner,
                    what: "asking for the session id")
                guard let pid = try rows.rows.first?.decode(Int32.self) else {
                    throw TKError(.protocolViolation, "\(owner): the server returned no pg_backend_pid().")
                }
                return PostgresSession(connection: connection, owner: owner, configuration: configuration, backendPID: pid)
            } catch {
                Self.close(connection)
                if let error = error as? TKError { throw error }
                throw configuration.queryError(error, owner: owner, what: "asking for the session id")
            }
        }

        /// Connects (as `connect(_:owner:deadline:)`) and runs `setUp` on the new session (creating
        /// tables, looking up keys); returns both. When `setUp` throws, the session is closed first.
        static func connect<SetUp>(
            _ configuration: TKPostgresConfiguration, owner: String, setUp: (PostgresSession) throws -> SetUp
        ) throws -> (session: PostgresSession, setUp: SetUp) {
            let session = try connect(configuration, owner: owner)
            do { return (session, try setUp(session)) } catch {
                session.close()
                throw error
            }
        }

        /// Runs `query` and returns its rows, waiting at most until `deadline` (default: the
        /// configuration's statement limit). A deadline that passes closes the session.
        func query(_ query: PostgresQuery, what: String, until deadline: ContinuousClock.Instant? = nil) throws -> [PostgresRow] {
            let future = connection.query(query, logger: Self.logger)
            do {
                return try Self.block(
                    on: future, until: deadline ?? DeadlineArithmetic.instant(configuration.statementTimeout), owner: owner, what: what
                ).rows
            } catch let error as TKError {
                if error.code == .systemCall && error.errno == ETIMEDOUT { close() }
                throw error
            } catch {
                throw configuration.queryError(error, owner: owner, what: what)
            }
        }

        /// Closes the session. It counts as closed from this call on, not from when the channel
        /// has closed: closing may take a while (a TLS close to a server process that is stopped,
        /// or that answers late), and a query queued on a closing connection may never be answered,
        /// so `TKPostgresLock.liveSession` must connect a new session instead of reusing this one.
        func close() {
            markClosed()
            Self.close(connection)
        }

        /// Makes the session count as closed without closing its channel yet (see `close()`).
        func markClosed() {
            stateLock.withLock { closedFlag = true }
        }

        deinit { Self.close(connection) }

        /// Closes `connection`, keeping it alive until the channel is closed: postgres-nio asserts
        /// (debug builds) that a connection is closed before it is deinitialized.
        private static func close(_ connection: PostgresConnection) {
            let closing: EventLoopFuture<Void> = connection.close()
            closing.whenComplete { _ in withExtendedLifetime(connection) {} }
        }

        /// Parks the calling thread until `future` completes or `deadline` passes (then throws
        /// `.systemCall` with ETIMEDOUT). Must not run on an event-loop thread: the future would need
        /// that very thread to complete.
        static func block<T: Sendable>(
            on future: EventLoopFuture<T>, until deadline: ContinuousClock.Instant,
            owner: String, what: String
        ) throws -> T {
            precondition(
                !future.eventLoop.inEventLoop,
                "ThreadKit misuse: \(owner): a blocking call ran on a SwiftNIO event-loop thread; call it from another thread.")
            let box = ResultBox<T>()
            let done = TKDispatchSemaphore(value: 0)
            future.whenComplete { result in
                box.set(result)
                done.signal()
            }
            if done.wait(until: deadline) == .timedOut {
                throw TKError(
                    .systemCall,
                    "\(owner): no answer from the server while \(what) before the deadline. "
                        + "Fix: check that the server is up and reachable, or allow a later deadline.", errno: ETIMEDOUT)
            }
            return try box.get()
        }

        private static let ids = TKAtomicInt64(0)
        private static func nextID() -> Int { Int(ids.increment()) }
    }

    // safety: `result` is touched only under `lock`.
    /// A future's result, handed from the event loop to the parked caller. Written once before the
    /// semaphore is signalled and read after the wait returns, so the semaphore orders the two; the
    /// lock only keeps a late completion (after a timed-out wait) from racing the caller's read.
    private final class ResultBox<T: Sendable>: @unchecked Sendable {
        private let lock = TKLock()
        private var result: Result<T, any Error>? // guarded by `lock`

        func set(_ value: Result<T, any Error>) { lock.withLock { result = value } }

        func get() throws -> T {
            guard let result = lock.withLock({ result }) else { preconditionFailure("ResultBox read before the future completed") }
            return try result.get()
        }
    }
#endif
