// PostgresQueueScenario: an operation queue that spans processes. Three worker processes
// (`threadkit-postgres tour --child pgqueue-worker …`, `workerRole` below) share 60 operations of a
// TKPostgresOperationQueue; halfway, one is killed with SIGKILL. Its leases expire, the other two
// rerun its operations with higher fencing tokens, and the append-only log the handlers write
// (checked here, not by the library) shows every operation finished exactly once with effect.
// Runs when TK_POSTGRES_URL names a reachable server; otherwise says how to start one.
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    enum PostgresQueueScenario {
        struct Work: Codable, Sendable {
            var milliseconds: Int
        }

        static let scenario = Scenario(
            name: "operation-queue-postgres", title: "an operation queue across processes on PostgreSQL: a worker killed halfway",
            source: "Apple's OperationQueue model; leases and fencing tokens (Kleppmann); SELECT … FOR UPDATE SKIP LOCKED"
        ) { say in
            guard let pointer = getenv(TKPostgresConfiguration.environmentVariable) else {
                say.say("TK_POSTGRES_URL is not set, so there is no server to run against. To run this scenario:")
                say.say("  eval \"$(.ci/postgres-cluster.sh start)\" && export TK_POSTGRES_URL   # a throwaway cluster (needs initdb)")
                say.say("  swift run threadkit-postgres tour operation-queue-postgres")
                return "not run: no server (TK_POSTGRES_URL unset); the lines above say how to start one"
            }
            let url = String(cString: pointer)
            let name = "tour-queue-\(getpid())"
            let log = "/tmp/tk-tour-queue-\(getpid()).log"
            unlink(log)
            defer { unlink(log) }
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            let operations = try (0..<60).map { _ in try TKPostgresOperation(kind: "work", payload: Work(milliseconds: 60)) }
            try queue.addOperations(operations, waitUntilFinished: false)
            say.say("added 60 operations of kind \"work\" (60 ms each, then a fenced write) to queue \"\(name)\"")
            let workers = try (0..<3).map { _ in try ChildLauncher("pgqueue-worker", [url, name, log]) }
            say.say("three worker processes: \(workers.map { String($0.pid) }.joined(separator: ", ")); each runs 2 at a time, lease 1 s")
            try say.check(
                pollUntil(.now + .seconds(60)) { ((try? queue.statistics().finished) ?? 0) >= 30 }, "the workers did not finish half")
            let victim = workers[0]
            kill(victim.pid, SIGKILL)
            _ = victim.wait()
            let statistics = try queue.statistics()
            say.say(
                "kill -9 worker \(victim.pid) halfway: \(statistics.finished) finished, \(statistics.running) running, "
                    + "\(statistics.depth) waiting")
            for operation in operations { _ = try queue.waitUntilFinished(operation.id ?? 0, before: .now + .seconds(60)) }
            for worker in workers.dropFirst() {
                kill(worker.pid, SIGKILL)
                _ = worker.wait()
            }
            // The judge: the log, line by line.
            let text = try readFile(log)
            var starts: [Int64: [Int64]] = [:]
            var lastRunner: [Int64: Substring] = [:]
            var accepted: [Int64: [Int64]] = [:]
            var refusedResults = 0
            for line in text.split(separator: "\n") {
                let words = line.split(separator: " ")
                guard words.count >= 4, let id = Int64(words[1]), let token = Int64(words[2]) else { continue }
                if words[0] == "start" {
                    try say.check(token > (starts[id]?.last ?? 0), "operation \(id): token \(token) not above its last run's")
                    starts[id, default: []].append(token)
                    lastRunner[id] = words[3]
                } else if words[0] == "done" {
                    if words[4] == "yes" { accepted[id, default: []].append(token) } else { refusedResults += 1 }
                }
            }
            let reruns = starts.filter { $0.value.count > 1 }
            // An operation the killed worker settled just before the kill has no "done" line (the kill
            // came between the commit and the write); its outcome, read back, says it finished.
            var settledByVictim = 0
            for operation in operations {
                let id = operation.id ?? 0
                let outcome = try queue.outcome(of: id)
                try say.check(outcome?.state == .finished, "operation \(id) did not finish")
                try say.check(outcome?.token == starts[id]?.max(), "operation \(id) finished with a stale token")
                if accepted[id] == nil && lastRunner[id] == Substring(String(victim.pid)) {
                    settledByVictim += 1
                    continue
                }
                try say.check(accepted[id]?.count == 1, "operation \(id) was accepted \(accepted[id]?.count ?? 0) times")
                try say.check(accepted[id]?.first == starts[id]?.max(), "operation \(id) was accepted with a stale token")
            }
            if let (id, tokens) = reruns.first {
                say.say(
                    "operation \(id) ran \(tokens.count) times, tokens \(tokens.map(String.init).joined(separator: " < ")): the killed run's lease expired"
                )
            }
            say.say(
                "log: 60 operations, each finished once with its latest token; \(reruns.count) rerun after the kill"
                    + (settledByVictim > 0 ? " (\(settledByVictim) settled by the victim just before the kill)" : ""))
            let final = try queue.statistics()
            say.say("statistics: depth \(final.depth), running \(final.running), finished \(final.finished), dead \(final.dead)")
            return "a worker killed mid-run lost no operation, and none finished twice"
        }

        /// The scenario's worker process: runs kind "work" of QUEUE until killed, appending
        /// "start ID TOKEN PID" and "done ID TOKEN PID yes|no STATE" lines to LOG.
        static func workerRole(_ arguments: [String]) -> Int32 {
            guard arguments.count == 3 else {
                Console.err("usage: threadkit-postgres tour --child pgqueue-worker URL QUEUE LOG (the scenario's own child process)")
                return 2
            }
            do {
                let queue = try TKPostgresOperationQueue(name: arguments[1], url: arguments[0])
                let log = open(arguments[2], O_WRONLY | O_CREAT | O_APPEND, 0o644)
                guard log >= 0 else { return 2 }
                let pid = getpid()
                try queue.register("work", payload: Work.self) { work, context in
                    append(log, "start \(context.operationID) \(context.token) \(pid)")
                    TKThread.sleep(for: .milliseconds(Int64(work.milliseconds)))
                    try context.fencedWrite("\(pid)", resource: "tour-op-\(context.operationID)")
                }
                _ = try queue.startWorker(concurrency: 2, lease: .seconds(1), pollInterval: .milliseconds(200)) { settled in
                    append(
                        log,
                        "done \(settled.operationID) \(settled.token) \(pid) \(settled.accepted ? "yes" : "no") \(settled.state ?? "-")")
                }
                while true { TKThread.sleep(for: .seconds(3600)) }
            } catch {
                Console.err("pgqueue-worker: \(error)")
                return 1
            }
        }

        /// One write(2) per line on an O_APPEND descriptor: lines of several processes never interleave.
        static func append(_ fd: Int32, _ line: String) {
            var text = line + "\n"
            text.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
        }

        static func readFile(_ path: String) throws -> String {
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw ScenarioFailure("cannot open \(path)") }
            defer { close(fd) }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                bytes += buffer[0..<n]
            }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
#endif
