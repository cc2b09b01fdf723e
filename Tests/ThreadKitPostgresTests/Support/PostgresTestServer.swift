// PostgresTestServer: the PostgreSQL server ThreadKitPostgresTests run against. `.ci/run` starts a
// throwaway cluster and exports TK_POSTGRES_URL and TK_POSTGRES_CLUSTER; without them (a plain
// `swift test`), the first test that needs a server starts one itself with
// .ci/postgres-cluster.sh (initdb + pg_ctl under a temporary directory) and stops it when the test
// bundle finishes. No server and no initdb is a test failure that says how to get one, never a skip.
// Also: psql, the independent judge the tests use to look at pg_locks and end sessions.
#if Postgres
    import Foundation
    import XCTest

    struct PostgresServerInfo: Sendable {
        let url: String
        /// The cluster directory, when the server is one of .ci/postgres-cluster.sh's (restartable).
        let cluster: String?
        let tls: Bool
        /// The cluster's superuser (`postgres`, trusted on the cluster's Unix socket in its directory),
        /// when the server is one of .ci/postgres-cluster.sh's: for settings only a superuser may
        /// change (commit_delay, fsync).
        var adminURL: String? { cluster.map { "postgres://postgres@/threadkit?host=\($0)&port=\(port)" } }
        /// The server's port, from the URL.
        var port: Int { Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") ?? 0 }
    }

    enum PostgresTestServer {
        static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".ci/postgres-cluster.sh").path

        private static let started: Result<PostgresServerInfo, PostgresServerUnavailable> = start()

        /// The server, starting one on first use when the environment names none.
        static func info() throws -> PostgresServerInfo { try started.get() }

        private static func start() -> Result<PostgresServerInfo, PostgresServerUnavailable> {
            let environment = ProcessInfo.processInfo.environment
            if let url = environment["TK_POSTGRES_URL"], !url.isEmpty {
                return .success(
                    PostgresServerInfo(url: url, cluster: environment["TK_POSTGRES_CLUSTER"], tls: environment["TK_POSTGRES_TLS"] == "1"))
            }
            let result = shell([script, "start"])
            guard result.status == 0 else {
                return .failure(
                    PostgresServerUnavailable(
                        message: "TK_POSTGRES_URL is unset and \(script) start failed (\(result.error)). "
                            + "Fix: install PostgreSQL (apt-get install postgresql) or export TK_POSTGRES_URL."))
            }
            var values: [String: String] = [:]
            for line in result.output.split(separator: "\n") {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
            }
            guard let url = values["TK_POSTGRES_URL"], let cluster = values["TK_POSTGRES_CLUSTER"] else {
                return .failure(PostgresServerUnavailable(message: "\(script) start printed no URL: \(result.output)"))
            }
            let stopper = ClusterStopper(cluster: cluster)
            XCTestObservationCenter.shared.addTestObserver(stopper)
            atexit { ClusterStopper.stopAll() }
            return .success(PostgresServerInfo(url: url, cluster: cluster, tls: values["TK_POSTGRES_TLS"] == "1"))
        }

        /// Restarts the server (fast shutdown: every session ends), waiting until it is back.
        static func restart() throws { try cluster("restart") }
        static func stopServer() throws { try cluster("stopserver") }
        static func startServer() throws { try cluster("startserver") }

        private static func cluster(_ command: String) throws {
            guard let dir = try info().cluster else {
                throw XCTSkip(
                    "the server in TK_POSTGRES_URL was not started by .ci/postgres-cluster.sh (TK_POSTGRES_CLUSTER unset), "
                        + "so this test cannot restart it")
            }
            let result = shell([script, command, dir])
            if result.status != 0 { throw PostgresServerUnavailable(message: "\(command) failed: \(result.error)") }
        }

        /// Runs SQL through psql on the test server; returns its unaligned, tuples-only output.
        @discardableResult
        static func psql(_ sql: String) throws -> String { try psql(sql, url: try info().url) }

        /// Runs SQL as the cluster's superuser (skips the test when the server is not one of
        /// .ci/postgres-cluster.sh's, so no superuser URL is known).
        @discardableResult
        static func psqlAdmin(_ sql: String) throws -> String {
            guard let admin = try info().adminURL else {
                throw XCTSkip(
                    "the server in TK_POSTGRES_URL was not started by .ci/postgres-cluster.sh (TK_POSTGRES_CLUSTER unset), "
                        + "so this test cannot change the settings only a superuser may change")
            }
            return try psql(sql, url: admin)
        }

        private static func psql(_ sql: String, url: String) throws -> String {
            let result = shell(["psql", url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            if result.status != 0 { throw PostgresServerUnavailable(message: "psql -c \"\(sql)\" failed: \(result.error)") }
            return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// Runs a command to completion (PATH lookup) with posix_spawnp and waitpid, its output in
        /// temporary files: pg_ctl's server outlives the command and must not hold a pipe of ours
        /// open, and Foundation's Process was seen to miss the exit of a command that started one.
        static func shell(_ arguments: [String]) -> (status: Int32, output: String, error: String) {
            let base = NSTemporaryDirectory() + "tk-pg-shell-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let outPath = base + ".out"
            let errPath = base + ".err"
            defer {
                unlink(outPath)
                unlink(errPath)
            }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            var environment = ProcessInfo.processInfo.environment
            environment["PATH"] = (environment["PATH"] ?? "/usr/bin:/bin") + ":/usr/lib/postgresql/15/bin"
            environment["PGCONNECT_TIMEOUT"] = "10"
            let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
            let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer {
                argv.forEach { free($0) }
                envp.forEach { free($0) }
            }
            var pid: pid_t = 0
            let spawned = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
            guard spawned == 0 else { return (127, "", "posix_spawnp \(arguments[0]): \(String(cString: strerror(spawned)))") }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            let output = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
            let error = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            let exited = status & 0x7F == 0
            return (exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), output, error)
        }
    }

    struct PostgresServerUnavailable: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// Stops the cluster the tests started, when the bundle finishes (or at exit, whichever first).
    final class ClusterStopper: NSObject, XCTestObservation, @unchecked Sendable {
        private static let lock = NSLock()
        nonisolated(unsafe) private static var clusters: [String] = [] // guarded by `lock`

        init(cluster: String) {
            Self.lock.withLock { Self.clusters.append(cluster) }
        }

        func testBundleDidFinish(_ testBundle: Bundle) { Self.stopAll() }

        static func stopAll() {
            let dirs = lock.withLock { () -> [String] in
                defer { clusters = [] }
                return clusters
            }
            for dir in dirs { _ = PostgresTestServer.shell([PostgresTestServer.script, "stop", dir]) }
        }
    }
#endif
