// PostgresBenchmarks: TKPostgresLock (ThreadKitPostgres) against the file-based TKDistributedLock
// and against a plain pg_advisory_lock / pg_advisory_unlock call sequence on a postgres-nio
// connection (what client code does by hand, without fencing tokens or loss detection). Needs a
// server: TK_POSTGRES_URL (e.g. `eval "$(.ci/postgres-cluster.sh start)"; export TK_POSTGRES_URL`);
// the group says so and is skipped when it is unset.
//   - uncontended acquire + release, one process: TKPostgresLock.tryLock + unlock (3 round trips:
//     try, token update, unlock), lock(before:) + unlock (4: lock_timeout, lock, token, unlock),
//     plain (2), and TKDistributedLock.tryLock + unlock (file system only);
//   - 8 processes contending, N acquisitions each, throughput: each child connects, reports
//     ready, waits for a start gate (a file), runs, exits; timed from the gate to the last exit.
import Foundation
import Glibc
import Logging
import PostgresNIO
import ThreadKit
import ThreadKitPostgres

enum PostgresBenchmarks {
    static func rows() -> [Row] {
        guard let url = ProcessInfo.processInfo.environment["TK_POSTGRES_URL"] else {
            print(
                "postgres: skipped — TK_POSTGRES_URL is unset. Start a throwaway server with "
                    + "`eval \"$(.ci/postgres-cluster.sh start)\"; export TK_POSTGRES_URL` (from the repository root).\n")
            return []
        }
        return [uncontended(url), contended(url)]
    }

    static func uncontended(_ url: String) -> Row {
        let name = "bench-\(getpid())"
        let lock = try! TKPostgresLock(name: name, url: url)
        let plain = PlainAdvisoryLock(url: url)
        let path = "/tmp/tkbench-\(getpid()).lock"
        let file = try! TKDistributedLock(path: path)
        return Row(
            group: "postgres", name: "uncontended acquire + release (one process, loopback server)", operations: 500,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKPostgresLock tryLock+unlock") { n in
                    timed {
                        for _ in 0..<n {
                            precondition(try! lock.tryLock())
                            try! lock.unlock()
                        }
                    }
                },
                Contender(name: "TKPostgresLock lock(before:)+unlock") { n in
                    timed {
                        for _ in 0..<n {
                            precondition(try! lock.lock(before: .now + .seconds(10)))
                            try! lock.unlock()
                        }
                    }
                },
                Contender(name: "plain pg_advisory_lock/unlock") { n in
                    timed {
                        for _ in 0..<n {
                            plain.lock()
                            plain.unlock()
                        }
                    }
                },
                Contender(name: "TKDistributedLock (file)") { n in
                    timed {
                        for _ in 0..<n {
                            precondition(file.tryLock())
                            try! file.unlock()
                        }
                    }
                },
            ], reference: "plain pg_advisory_lock/unlock", target: "a few round trips; the file lock never leaves the machine")
    }

    static func contended(_ url: String) -> Row {
        let processes = 8
        func run(_ kind: String, _ n: Int) -> Double {
            let name = "bench-contended-\(getpid())-\(kind)"
            let gate = "/tmp/tkbench-gate-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let target = kind == "file" ? "/tmp/tkbench-contended-\(getpid()).lock" : url
            var children: [(Process, Pipe)] = []
            for _ in 0..<processes {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
                process.arguments = ["pglock-child", kind, target, name, String(max(1, n / processes)), gate]
                let out = Pipe()
                process.standardOutput = out
                try! process.run()
                children.append((process, out))
            }
            for (_, out) in children { _ = out.fileHandleForReading.readData(ofLength: 6) } // "ready\n"
            let elapsed = timed {
                _ = FileManager.default.createFile(atPath: gate, contents: nil)
                for (process, _) in children { process.waitUntilExit() }
            }
            unlink(gate)
            for (process, _) in children where process.terminationStatus != 0 {
                print("pglock-child \(kind) failed: \(process.terminationStatus)")
            }
            return elapsed
        }
        return Row(
            group: "postgres", name: "8 processes contending (per acquisition, all processes together)", operations: 800,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKPostgresLock lock(before:)") { n in run("tk", n) },
                Contender(name: "plain pg_advisory_lock") { n in run("plain", n) },
                Contender(name: "TKDistributedLock (file, tryLock + backoff)") { n in run("file", n) },
            ], reference: "plain pg_advisory_lock", target: "the server hands the lock over; the file lock polls")
    }

    /// The child of the contended row: `pglock-child KIND URL|PATH NAME N GATE`.
    static func child(_ arguments: [String]) -> Int32 {
        guard arguments.count == 5, let n = Int(arguments[3]) else { return 2 }
        let (kind, target, name, gate) = (arguments[0], arguments[1], arguments[2], arguments[4])
        var acquire: () -> Void
        var release: () -> Void
        switch kind {
        case "tk":
            let lock = try! TKPostgresLock(name: name, url: target)
            acquire = { precondition(try! lock.lock(before: .now + .seconds(120))) }
            release = { try! lock.unlock() }
        case "plain":
            let plain = PlainAdvisoryLock(url: target)
            acquire = { plain.lock() }
            release = { plain.unlock() }
        default:
            let file = try! TKDistributedLock(path: target)
            acquire = {
                var backoff = 1
                while !file.tryLock() {
                    usleep(UInt32(backoff * 50))
                    backoff = min(backoff * 2, 20)
                }
            }
            release = { try! file.unlock() }
        }
        print("ready")
        fflush(nil)
        while access(gate, F_OK) != 0 { usleep(100) }
        for _ in 0..<n {
            acquire()
            release()
        }
        return 0
    }
}

/// One postgres-nio connection to `url`, opened the obvious blocking way (EventLoopFuture.wait()),
/// for the plain clients the rows compare against.
func plainConnection(url: String, logger: Logger) -> PostgresConnection {
    let configuration = try! TKPostgresConfiguration(url: url)
    let nio = PostgresConnection.Configuration(
        host: configuration.host, port: configuration.port, username: configuration.user,
        password: configuration.password, database: configuration.database, tls: .disable)
    return try! PostgresConnection.connect(
        on: MultiThreadedEventLoopGroup.singleton.any(), configuration: nio, id: 1, logger: logger
    ).wait()
}

/// pg_advisory_lock / pg_advisory_unlock on one postgres-nio connection, blocking with
/// EventLoopFuture.wait() as plain client code would: no token, no loss detection.
final class PlainAdvisoryLock: @unchecked Sendable {
    let connection: PostgresConnection
    let key: Int64 = 0x0B0B_0B0B
    let logger = Logger(label: "plain", factory: { _ in SwiftLogNoOpLogHandler() })

    init(url: String) { connection = plainConnection(url: url, logger: logger) }

    func lock() { _ = try! connection.query("SELECT pg_advisory_lock(\(key))", logger: logger).wait() }
    func unlock() { _ = try! connection.query("SELECT pg_advisory_unlock(\(key))", logger: logger).wait() }
}
