// TKPostgresConfiguration: where the PostgreSQL server is and how to reach it, parsed from a
// connection URL (libpq's URI form), and the translation of postgres-nio's errors into TKErrors
// that name what to fix. Immutable value.
//
//   postgres[ql]://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMETERS]
//   parameters: sslmode=disable|prefer|require|verify-full (default prefer, as libpq),
//               host=/socket/directory (a Unix socket; HOST in the authority is then ignored),
//               connect_timeout=SECONDS (1 to 86400, default 5), application_name=NAME
// USER and PASSWORD are percent-decoded.
#if Postgres
    import FoundationEssentials
    import Glibc
    import PostgresNIO
    import ThreadKit

    /// Where a PostgreSQL server is and how to reach it, from a connection URL.
    public struct TKPostgresConfiguration: Sendable, Equatable {
        /// Whether the connection uses TLS, as libpq's `sslmode` (URL parameter `sslmode`: `allow`
        /// reads as `disable`, `verify-ca` as `require`).
        public enum TLSMode: String, Sendable, Equatable {
            /// Never TLS.
            case disable
            /// TLS when the server offers it, without verifying its certificate (libpq's default).
            case prefer
            /// TLS or no connection; the certificate is not verified (libpq's `require`).
            case require
            /// TLS or no connection; the certificate chain and host name are verified.
            case verifyFull = "verify-full"

            /// The mode whose raw value (its `sslmode` spelling) is `rawValue`: "disable", "prefer",
            /// "require" or "verify-full"; nil for anything else. Written out for its documentation; it is
            /// what the compiler would synthesize (the URL parser also maps "allow" and "verify-ca").
            public init?(rawValue: String) {
                switch rawValue {
                case "disable": self = .disable
                case "prefer": self = .prefer
                case "require": self = .require
                case "verify-full": self = .verifyFull
                default: return nil
                }
            }
        }

        /// The server's host name or address (default "localhost"); ignored when `socketDirectory` is set.
        public var host: String
        /// The server's TCP port (default 5432); with `socketDirectory`, the number in the socket file's name.
        public var port: Int
        /// The directory holding the server's Unix socket, when connecting through one.
        public var socketDirectory: String?
        /// The user to log in as (default "postgres"), percent-decoded from the URL.
        public var user: String
        /// The password, percent-decoded from the URL; nil when the URL gives none.
        public var password: String?
        /// The database to connect to; by default the user's name, as libpq does.
        public var database: String
        /// Whether and how TLS is used (URL parameter `sslmode`, default `.prefer`).
        public var tls: TLSMode
        /// How long a connection attempt may take (URL parameter `connect_timeout`, seconds). Values
        /// of 100 years or more are taken as 100 years, below 1 ms as 1 ms.
        public var connectTimeout: Duration
        /// How long a short statement (not a lock wait) may take before the session is given up.
        /// Values of 100 years or more are taken as 100 years.
        public var statementTimeout: Duration = .seconds(15)

        /// The largest `connect_timeout` a URL may give, in seconds (a day).
        public static let maximumConnectTimeoutSeconds = 86_400

        /// The environment variable read by `fromEnvironment()`.
        public static let environmentVariable = "TK_POSTGRES_URL"

        /// Parses a connection URL. Throws `.invalidArgument` naming what is wrong with it.
        public init(url: String) throws {
            func bad(_ why: String) -> TKError {
                TKError(
                    .invalidArgument,
                    "TKPostgresConfiguration(url: \"\(Self.redacted(url))\"): \(why). Fix: use "
                        + "postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=require] (libpq's URI form).")
            }
            var rest = Substring(url)
            if rest.hasPrefix("postgres://") {
                rest = rest.dropFirst("postgres://".count)
            } else if rest.hasPrefix("postgresql://") {
                rest = rest.dropFirst("postgresql://".count)
            } else {
                throw bad("the scheme is not postgres:// or postgresql://")
            }
            var query = Substring("")
            if let mark = rest.firstIndex(of: "?") {
                query = rest[rest.index(after: mark)...]
                rest = rest[..<mark]
            }
            var path = Substring("")
            if let slash = rest.firstIndex(of: "/") {
                path = rest[rest.index(after: slash)...]
                rest = rest[..<slash]
            }
            var user = "postgres"
            var password: String? = nil
            if let at = rest.lastIndex(of: "@") {
                let credentials = rest[..<at]
                rest = rest[rest.index(after: at)...]
                if let colon = credentials.firstIndex(of: ":") {
                    user = try Self.percentDecoded(credentials[..<colon], bad)
                    password = try Self.percentDecoded(credentials[credentials.index(after: colon)...], bad)
                } else {
                    user = try Self.percentDecoded(credentials, bad)
                }
            }
            var host = "localhost"
            var port = 5432
            if rest.hasPrefix("[") { // [IPv6]:port
                guard let close = rest.firstIndex(of: "]") else { throw bad("an IPv6 address lacks its closing ]") }
                host = String(rest[rest.index(after: rest.startIndex)..<close])
                rest = rest[rest.index(after: close)...]
                if rest.hasPrefix(":") { rest = rest.dropFirst() } else { rest = "" }
                if !rest.isEmpty {
                    guard let p = Int(rest), (1...65535).contains(p) else {
                        throw bad("the port \"\(rest)\" is not a number from 1 to 65535")
                    }
                    port = p
                }
            } else {
                if let colon = rest.lastIndex(of: ":") {
                    let text = rest[rest.index(after: colon)...]
                    guard let p = Int(text), (1...65535).contains(p) else {
                        throw bad("the port \"\(text)\" is not a number from 1 to 65535")
                    }
                    port = p
                    rest = rest[..<colon]
                }
                if !rest.isEmpty { host = String(rest) }
            }
            self.host = host
            self.port = port
            self.user = user
            self.password = password
            self.database = path.isEmpty ? user : try Self.percentDecoded(path, bad)
            self.tls = .prefer
            self.connectTimeout = .seconds(5)
            for pair in query.split(separator: "&") where !pair.isEmpty {
                let parts = pair.split(separator: "=", maxSplits: 1)
                let key = String(parts[0])
                let value = parts.count > 1 ? try Self.percentDecoded(parts[1], bad) : ""
                switch key {
                case "sslmode":
                    switch value {
                    case "disable", "allow": tls = .disable
                    case "prefer": tls = .prefer
                    case "require", "verify-ca": tls = .require
                    case "verify-full": tls = .verifyFull
                    default: throw bad("sslmode=\(value) is not disable, prefer, require or verify-full")
                    }
                case "host":
                    guard value.hasPrefix("/") else { throw bad("host=\(value) is not a socket directory (an absolute path)") }
                    socketDirectory = value
                case "connect_timeout":
                    guard let seconds = Int(value), seconds > 0 else {
                        throw bad("connect_timeout=\(value) is not a positive number of seconds")
                    }
                    guard seconds <= Self.maximumConnectTimeoutSeconds else {
                        throw bad(
                            "connect_timeout=\(value) is more than \(Self.maximumConnectTimeoutSeconds) seconds (a day), the longest "
                                + "accepted: a connection attempt that long is never noticed as failed")
                    }
                    connectTimeout = .seconds(seconds)
                case "application_name":
                    break
                default:
                    throw bad("the parameter \"\(key)\" is not supported (sslmode, host, connect_timeout, application_name are)")
                }
            }
        }

        /// The configuration in `TK_POSTGRES_URL`; throws `.invalidArgument` saying how to set it
        /// when it is unset.
        public static func fromEnvironment() throws -> TKPostgresConfiguration {
            guard let pointer = getenv(environmentVariable) else {
                throw TKError(
                    .invalidArgument,
                    "\(environmentVariable) is not set. Fix: export \(environmentVariable)="
                        + "postgres://USER:PASSWORD@HOST:PORT/DATABASE, or pass the URL to the initializer "
                        + "(a throwaway server: .ci/postgres-cluster.sh start).")
            }
            return try TKPostgresConfiguration(url: String(cString: pointer))
        }

        /// host:port or the socket, for messages.
        var serverDescription: String {
            if let socketDirectory {
                return "the server's socket in \(socketDirectory) (port \(port)), database \"\(database)\" as \"\(user)\""
            }
            return "\(host):\(port), database \"\(database)\" as \"\(user)\""
        }

        /// The URL with its password replaced by ***, for messages.
        static func redacted(_ url: String) -> String {
            guard let at = url.lastIndex(of: "@"), let scheme = url.range(of: "://"), scheme.upperBound < at,
                let colon = url[scheme.upperBound..<at].firstIndex(of: ":")
            else { return url }
            return String(url[..<url.index(after: colon)]) + "***" + String(url[at...])
        }

        private static func percentDecoded(_ text: Substring, _ bad: (String) -> TKError) throws -> String {
            var bytes: [UInt8] = []
            var index = text.utf8.startIndex
            let utf8 = text.utf8
            while index != utf8.endIndex {
                let byte = utf8[index]
                if byte == UInt8(ascii: "%") {
                    let first = utf8.index(after: index)
                    guard first != utf8.endIndex, utf8.index(after: first) != utf8.endIndex,
                        let value = UInt8(String(decoding: utf8[first...utf8.index(after: first)], as: UTF8.self), radix: 16)
                    else {
                        throw bad("\"\(text)\" has a % not followed by two hex digits")
                    }
                    bytes.append(value)
                    index = utf8.index(first, offsetBy: 2)
                } else {
                    bytes.append(byte)
                    index = utf8.index(after: index)
                }
            }
            return String(decoding: bytes, as: UTF8.self)
        }

        /// postgres-nio's configuration for this server.
        func nioConfiguration(owner: String) throws -> PostgresConnection.Configuration {
            var configuration: PostgresConnection.Configuration
            if let socketDirectory {
                configuration = .init(
                    unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
            } else {
                let tlsSetting: PostgresConnection.Configuration.TLS
                do {
                    switch tls {
                    case .disable:
                        tlsSetting = .disable
                    case .prefer, .require:
                        var client = TLSConfiguration.makeClientConfiguration()
                        client.certificateVerification = .none
                        let context = try NIOSSLContext(configuration: client)
                        tlsSetting = tls == .prefer ? .prefer(context) : .require(context)
                    case .verifyFull:
                        tlsSetting = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
                    }
                } catch {
                    throw TKError(
                        .invalidArgument,
                        "\(owner): cannot set up TLS (\(error)). Fix: use sslmode=disable or install the system's CA certificates.")
                }
                configuration = .init(host: host, port: port, username: user, password: password, database: database, tls: tlsSetting)
            }
            return configuration
        }

        /// A failed connection attempt, as a TKError naming what to fix.
        func connectError(_ error: any Error, owner: String) -> TKError {
            if let psql = error as? PSQLError {
                if let state = psql.serverInfo?[.sqlState] {
                    let message = psql.serverInfo?[.message] ?? ""
                    switch state {
                    case "28P01", "28000":
                        return TKError(
                            .invalidArgument,
                            "\(owner): the server at \(serverDescription) refused the credentials "
                                + "(\(state): \(message)). Fix: correct the user and password in the URL (\(Self.environmentVariable)).")
                    case "3D000":
                        return TKError(
                            .invalidArgument,
                            "\(owner): \(message) at \(serverDescription). Fix: create the database or name an existing one in the URL.")
                    case "57P03":
                        return TKError(
                            .systemCall,
                            "\(owner): \(serverDescription) is starting up or shutting down (\(message)). "
                                + "Fix: retry once it is up (lock(before:) retries until its deadline).", errno: EAGAIN)
                    case "53300":
                        return TKError(
                            .systemCall,
                            "\(owner): \(serverDescription) has no connection slots left (\(message)). "
                                + "Fix: raise max_connections or close idle sessions.", errno: EAGAIN)
                    default:
                        return TKError(
                            .protocolViolation,
                            "\(owner): the server at \(serverDescription) refused the connection (\(state): \(message)).")
                    }
                }
                if psql.code == .sslUnsupported {
                    return TKError(
                        .invalidArgument,
                        "\(owner): the URL asks for TLS (sslmode=\(tls.rawValue)) but \(serverDescription) does not offer it. "
                            + "Fix: turn ssl on in the server or use sslmode=prefer/disable.")
                }
                if psql.code == .authMechanismRequiresPassword {
                    return TKError(
                        .invalidArgument,
                        "\(owner): the server at \(serverDescription) asks for a password and the URL has none. "
                            + "Fix: postgres://USER:PASSWORD@HOST:PORT/DATABASE.")
                }
                if let underlying = psql.underlying { return connectError(underlying, owner: owner) }
            }
            let errno = Self.errno(of: error)
            return TKError(
                .systemCall,
                "\(owner): cannot connect to \(serverDescription) (\(Self.describe(error))). "
                    + "Fix: start the server or correct the host and port in the URL (\(Self.environmentVariable)).", errno: errno)
        }

        /// A failed statement, as a TKError.
        func queryError(_ error: any Error, owner: String, what: String) -> TKError {
            if let psql = error as? PSQLError {
                if let state = psql.serverInfo?[.sqlState] {
                    let message = psql.serverInfo?[.message] ?? ""
                    if state.hasPrefix("57P") || state.hasPrefix("08") {
                        return TKError(
                            .systemCall, "\(owner): the server ended the session while \(what) (\(state): \(message)).", errno: ECONNRESET)
                    }
                    return TKError(.protocolViolation, "\(owner): the server refused \(what) (\(state): \(message)).")
                }
                if psql.code == .serverClosedConnection || psql.code == .clientClosedConnection || psql.code == .uncleanShutdown
                    || psql.code == .connectionError
                {
                    return TKError(
                        .systemCall, "\(owner): the connection to \(serverDescription) was lost while \(what).", errno: ECONNRESET)
                }
            }
            return TKError(.protocolViolation, "\(owner): \(what) failed: \(Self.describe(error)).")
        }

        /// The errno inside a NIO error, when there is one.
        static func errno(of error: any Error) -> Int32? {
            if let io = error as? IOError { return io.errnoCode }
            if let connection = error as? NIOConnectionError {
                for failure in connection.connectionErrors { if let code = errno(of: failure.error) { return code } }
            }
            if let channel = error as? ChannelError, case .connectTimeout = channel { return ETIMEDOUT }
            if let psql = error as? PSQLError, let underlying = psql.underlying { return errno(of: underlying) }
            return nil
        }

        /// A readable description (PSQLError hides everything in its plain description).
        static func describe(_ error: any Error) -> String {
            if let psql = error as? PSQLError {
                if let message = psql.serverInfo?[.message] { return message }
                if let underlying = psql.underlying { return describe(underlying) }
                return "\(psql.code)"
            }
            if let channel = error as? ChannelError, case .connectTimeout(let amount) = channel {
                return "no answer within \(amount.nanoseconds / 1_000_000) ms"
            }
            return "\(error)"
        }
    }
#endif
