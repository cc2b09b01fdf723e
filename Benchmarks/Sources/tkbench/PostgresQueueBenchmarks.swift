// PostgresQueueBenchmarks: `tkbench pgqueue [--rounds N] [--operations N]`: TKPostgresOperationQueue
// (ThreadKitPostgres) against a plain SKIP LOCKED job loop on postgres-nio, with worker processes.
// Needs a server: TK_POSTGRES_URL (e.g. `eval "$(.ci/postgres-cluster.sh start)"; export TK_POSTGRES_URL`).
//   - throughput of empty operations, 4 worker processes, N operations added beforehand, timed
//     from a start gate (a file) until none is left open; rounds alternate the two sides, the
//     median is reported. The plain loop is what client code does by hand: one connection per
//     process, claim one row (UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)
//     RETURNING), run it, mark it done; no lease, token, retries or dependencies.
//   - pickup latency with 4 idle worker processes: from before addOperation to the handler's
//     first instruction (CLOCK_MONOTONIC, shared by the processes of one machine), one at a time.
//   - a 10,000-operation dependency DAG across 4 worker processes: every edge checked in the
//     handlers' append-only log (the dependency's "e" line before the dependent's "s" line).
// Children: `tkbench pgqueue-child tk|plain URL QUEUE|TABLE CONCURRENCY GATE LOG`.
import Foundation
import Glibc
import Logging
import PostgresNIO
import ThreadKit
import ThreadKitPostgres

enum PostgresQueueBenchmarks {
    struct Empty: Codable, Sendable {}

    static func monotonicNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    static func main(_ arguments: [String]) -> Int32 {
        guard let url = ProcessInfo.processInfo.environment["TK_POSTGRES_URL"] else {
            print(
                "pgqueue: TK_POSTGRES_URL is unset. Start a throwaway server with `eval \"$(.ci/postgres-cluster.sh start)\"; export TK_POSTGRES_URL`."
            )
            return 2
        }
        var rounds = 3
        var operations = 20_000
        if let i = arguments.firstIndex(of: "--rounds"), i + 1 < arguments.count, let n = Int(arguments[i + 1]) { rounds = n }
        if let i = arguments.firstIndex(of: "--operations"), i + 1 < arguments.count, let n = Int(arguments[i + 1]) { operations = n }
        let only = Set(arguments.filter { ["throughput", "latency", "dag"].contains($0) })
        print("pgqueue: TKPostgresOperationQueue vs a plain SKIP LOCKED loop (postgres-nio); 4 worker processes")
        if only.isEmpty || only.contains("throughput") {
            var ours: [Double] = []
            var plain: [Double] = []
            for round in 0..<rounds {
                ours.append(throughputTK(url, operations, round: round))
                plain.append(throughputPlain(url, operations, round: round))
                print(String(format: "  round %d: TKPostgresOperationQueue %.0f/s, plain loop %.0f/s", round + 1, ours.last!, plain.last!))
            }
            let (a, b) = (median(ours), median(plain))
            print(
                String(
                    format:
                        "throughput, %d empty operations, 4 processes (median of %d): TKPostgresOperationQueue %.0f/s, plain %.0f/s, ratio %.2fx (target >= 10,000/s and >= 0.8x)",
                    operations, rounds, a, b, a / b))
        }
        if only.isEmpty || only.contains("latency") { latency(url) }
        if only.isEmpty || only.contains("dag") { dag(url) }
        return 0
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }

    /// Starts 4 children; returns them once each printed "ready".
    static func children(_ kind: String, _ url: String, _ target: String, concurrency: Int, gate: String, log: String) -> [Process] {
        (0..<4).map { _ in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = ["pgqueue-child", kind, url, target, String(concurrency), gate, log]
            let out = Pipe()
            process.standardOutput = out
            try! process.run()
            _ = out.fileHandleForReading.readData(ofLength: 6) // "ready\n"
            return process
        }
    }

    static func stop(_ processes: [Process]) {
        for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        for process in processes { process.waitUntilExit() }
    }

    static func throughputTK(_ url: String, _ n: Int, round: Int) -> Double {
        let name = "bench-tk-\(getpid())-\(round)"
        let queue = try! TKPostgresOperationQueue(name: name, url: url)
        let probe = PlainSession(url: url)
        probe.exec("VACUUM threadkit_ops") // earlier rounds' rows are deleted; as the plain side's table is fresh
        var added = 0
        while added < n {
            let batch = min(5000, n - added)
            try! queue.addOperations(
                (0..<batch).map { _ in try! TKPostgresOperation(kind: "empty", payload: Empty()) }, waitUntilFinished: false)
            added += batch
        }
        probe.exec("ANALYZE threadkit_ops") // as the plain side's VACUUM ANALYZE after its insert
        let gate = "/tmp/tkbench-pgqueue-gate-\(getpid())-\(round)"
        let workers = children("tk", url, name, concurrency: 32, gate: gate, log: "-")
        let start = monotonicNanoseconds()
        _ = FileManager.default.createFile(atPath: gate, contents: nil)
        while probe.int(
            "SELECT count(*) FROM threadkit_ops WHERE queue_id = (SELECT id FROM threadkit_queues WHERE name = '\(name)') AND state IN ('pending', 'running')"
        ) > 0 {
            usleep(2000)
        }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        stop(workers)
        unlink(gate)
        let finished = probe.int(
            "SELECT count(*) FROM threadkit_ops WHERE queue_id = (SELECT id FROM threadkit_queues WHERE name = '\(name)') AND state = 'finished'"
        )
        precondition(finished == n, "TKPostgresOperationQueue finished \(finished) of \(n)")
        probe.exec("DELETE FROM threadkit_ops WHERE queue_id = (SELECT id FROM threadkit_queues WHERE name = '\(name)')")
        return Double(n) / seconds
    }

    static func throughputPlain(_ url: String, _ n: Int, round: Int) -> Double {
        let table = "bench_plain_jobs_\(getpid())_\(round)"
        let probe = PlainSession(url: url)
        probe.exec("CREATE TABLE \(table) (id bigserial PRIMARY KEY, payload text NOT NULL, state text NOT NULL DEFAULT 'pending')")
        probe.exec("CREATE INDEX ON \(table) (id) WHERE state = 'pending'")
        probe.exec("INSERT INTO \(table) (payload) SELECT '{}' FROM generate_series(1, \(n))")
        probe.exec("VACUUM ANALYZE \(table)")
        let gate = "/tmp/tkbench-pgqueue-plain-gate-\(getpid())-\(round)"
        let workers = children("plain", url, table, concurrency: 1, gate: gate, log: "-")
        let start = monotonicNanoseconds()
        _ = FileManager.default.createFile(atPath: gate, contents: nil)
        for worker in workers { worker.waitUntilExit() }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        unlink(gate)
        let done = probe.int("SELECT count(*) FROM \(table) WHERE state = 'done'")
        precondition(done == n, "the plain loop finished \(done) of \(n)")
        probe.exec("DROP TABLE \(table)")
        return Double(n) / seconds
    }

    static func latency(_ url: String) {
        let name = "bench-latency-\(getpid())"
        let log = "/tmp/tkbench-pgqueue-latency-\(getpid()).log"
        unlink(log)
        let queue = try! TKPostgresOperationQueue(name: name, url: url)
        let gate = "/tmp/tkbench-pgqueue-gate-latency-\(getpid())"
        _ = FileManager.default.createFile(atPath: gate, contents: nil)
        let workers = children("tk", url, name, concurrency: 8, gate: gate, log: log)
        usleep(300_000) // the workers' first claims and LISTENs
        var sent: [Int64: (Int64, Int64)] = [:]
        for _ in 0..<200 {
            let before = monotonicNanoseconds()
            let id = try! queue.addOperation(try! TKPostgresOperation(kind: "ping", payload: Empty()))
            sent[id] = (before, monotonicNanoseconds())
            _ = try! queue.waitUntilFinished(id, before: .now + .seconds(30))
            usleep(5000) // idle workers: each is waiting again before the next insert
        }
        stop(workers)
        unlink(gate)
        var fromCall: [Double] = []
        var fromCommit: [Double] = []
        for line in try! String(contentsOfFile: log, encoding: .utf8).split(separator: "\n") {
            let words = line.split(separator: " ")
            guard words.count == 3, words[0] == "ping", let id = Int64(words[1]), let at = Int64(words[2]), let (before, after) = sent[id]
            else { continue }
            fromCall.append(Double(at - before) / 1e6)
            fromCommit.append(Double(at - after) / 1e6)
        }
        unlink(log)
        fromCall.sort()
        fromCommit.sort()
        print(
            String(
                format:
                    "pickup latency, 4 idle worker processes, %d operations: median %.2f ms from addOperation's call (p90 %.2f), %.2f ms from its return (target <= 5 ms)",
                fromCall.count, fromCall[fromCall.count / 2], fromCall[fromCall.count * 9 / 10], fromCommit[fromCommit.count / 2]))
    }

    static func dag(_ url: String) {
        let name = "bench-dag-\(getpid())"
        let log = "/tmp/tkbench-pgqueue-dag-\(getpid()).log"
        unlink(log)
        let queue = try! TKPostgresOperationQueue(name: name, url: url)
        let count = 10_000
        var generator = SystemRandomNumberGenerator()
        let operations = (0..<count).map { _ in try! TKPostgresOperation(kind: "dag", payload: Empty()) }
        var edges: [(Int, Int)] = []
        for index in 1..<count {
            for _ in 0..<Int.random(in: 0...3, using: &generator) {
                let dependency = max(0, index - Int.random(in: 1...200, using: &generator))
                try! operations[index].addDependency(operations[dependency])
                edges.append((dependency, index))
            }
        }
        let gate = "/tmp/tkbench-pgqueue-gate-dag-\(getpid())"
        let workers = children("tk", url, name, concurrency: 16, gate: gate, log: log)
        let start = monotonicNanoseconds()
        try! queue.addOperations(operations, waitUntilFinished: false)
        let inserted = Double(monotonicNanoseconds() - start) / 1e9
        _ = FileManager.default.createFile(atPath: gate, contents: nil)
        let probe = PlainSession(url: url)
        while probe.int(
            "SELECT count(*) FROM threadkit_ops WHERE queue_id = (SELECT id FROM threadkit_queues WHERE name = '\(name)') AND state IN ('pending', 'running')"
        ) > 0 {
            usleep(5000)
        }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        stop(workers)
        unlink(gate)
        var startLine: [Int64: Int] = [:]
        var endLine: [Int64: Int] = [:]
        for (number, line) in try! String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").enumerated() {
            let words = line.split(separator: " ")
            guard words.count == 2, let id = Int64(words[1]) else { continue }
            if words[0] == "s" {
                if startLine[id] != nil { print("  operation \(id) started twice") }
                startLine[id] = number
            }
            if words[0] == "e" { endLine[id] = number }
        }
        unlink(log)
        var violated = 0
        for (dependency, dependent) in edges {
            guard let end = endLine[operations[dependency].id!], let begin = startLine[operations[dependent].id!], end < begin else {
                violated += 1
                continue
            }
        }
        print(
            String(
                format:
                    "DAG: %d operations, %d edges, 4 worker processes: %.2f s (%.0f/s) including the insert (one transaction, %.2f s); %d of %d ran; edges violated per the log: %d",
                count, edges.count, seconds, Double(count) / seconds, inserted, startLine.count, count, violated))
    }

    /// `pgqueue-child tk|plain URL QUEUE|TABLE CONCURRENCY GATE LOG`.
    static func child(_ arguments: [String]) -> Int32 {
        guard arguments.count == 6, let concurrency = Int(arguments[3]) else { return 2 }
        let (kind, url, target, gate, logPath) = (arguments[0], arguments[1], arguments[2], arguments[4], arguments[5])
        let log = logPath == "-" ? -1 : open(logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        @Sendable func append(_ line: String) {
            var text = line + "\n"
            text.withUTF8 { _ = write(log, $0.baseAddress, $0.count) }
        }
        if kind == "plain" {
            let session = PlainSession(url: url)
            print("ready")
            fflush(nil)
            while access(gate, F_OK) != 0 { usleep(100) }
            while true {
                let rows = session.rows(
                    "UPDATE \(target) SET state = 'running' WHERE id = (SELECT id FROM \(target) WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, payload"
                )
                guard let row = rows.first, let (id, _) = try? row.decode((Int64, String).self) else { return 0 }
                session.exec("UPDATE \(target) SET state = 'done' WHERE id = \(id)")
            }
        }
        let queue = try! TKPostgresOperationQueue(name: target, url: url)
        try! queue.register("empty", payload: Empty.self) { _, _ in }
        try! queue.register("ping", payload: Empty.self) { _, context in append("ping \(context.operationID) \(monotonicNanoseconds())") }
        try! queue.register("dag", payload: Empty.self) { _, context in
            append("s \(context.operationID)")
            append("e \(context.operationID)")
        }
        print("ready")
        fflush(nil)
        while access(gate, F_OK) != 0 { usleep(100) }
        _ = try! queue.startWorker(concurrency: concurrency)
        while true { sleep(3600) }
    }
}

/// One postgres-nio connection used the obvious blocking way (EventLoopFuture.wait()).
// safety: `connection` is immutable and queues concurrent queries itself; `logger` is immutable.
final class PlainSession: @unchecked Sendable {
    let connection: PostgresConnection
    let logger = Logger(label: "plain", factory: { _ in SwiftLogNoOpLogHandler() })

    init(url: String) { connection = plainConnection(url: url, logger: logger) }

    func rows(_ sql: String) -> [PostgresRow] {
        try! connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).wait().rows
    }
    func exec(_ sql: String) { _ = rows(sql) }
    func int(_ sql: String) -> Int { Int((try? rows(sql).first?.decode(Int64.self)) ?? -1) }
}
