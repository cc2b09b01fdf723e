// PostgresQueueScenario: an operation queue that spans processes. Three worker processes
// (`threadkit-postgres tour --child pgqueue-worker …`, `workerRole` below) share 60 operations of a
// TKPostgresOperationQueue; halfway, one is killed with SIGKILL. Its leases expire, the other two
// rerun its operations with higher fencing tokens, and the append-only log the handlers write
// (checked here, not by the library) shows every operation finished exactly once with effect.
// ThreadKitPostgresTests' crash tests start the same worker (PostgresOperationQueueProcessTests).
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

        static let scenario = postgresScenario(
            name: "operation-queue-postgres", title: "an operation queue across processes on PostgreSQL: a worker killed halfway",
            source: "Apple's OperationQueue model; leases and fencing tokens (Kleppmann); SELECT … FOR UPDATE SKIP LOCKED"
        ) { say, url in
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

        /// The queue's worker process, the scenario's and ThreadKitPostgresTests' crash tests' (`tour
        /// --child pgqueue-worker URL QUEUE LOG [LEASE_MS CONCURRENCY]`, defaults 1000 ms and 2): runs
        /// kind "work" of QUEUE until killed, prints "    worker PID: ready" once it runs, and appends
        /// to LOG (an AppendLog, so the lines of several workers never interleave):
        ///   start ID TOKEN PID       the handler began a run
        ///   effect ID TOKEN PID      its fenced write (resource "op-ID") was accepted
        ///   refused ID TOKEN PID     its fenced write was refused (a later run wrote with a higher token)
        ///   lost ID TOKEN PID        its fenced write failed on the way (the connection broke: a
        ///                            partition); the handler then writes again, as a handler that
        ///                            insists on its side effect would, until the write is accepted or
        ///                            refused (60 s at most)
        ///   done ID TOKEN PID yes|no STATE   the worker settled the run: accepted by the database or not
        static func workerRole(_ arguments: [String]) -> Int32 {
            let tuning = arguments.dropFirst(3).map { Int($0) }
            guard arguments.count == 3 || arguments.count == 5, !tuning.contains(nil), let log = AppendLog(path: arguments[2]) else {
                Console.err(
                    "usage: threadkit-postgres tour --child pgqueue-worker URL QUEUE LOG [LEASE_MS CONCURRENCY] (the queue's worker process)"
                )
                return 2
            }
            let leaseMilliseconds = tuning.first.flatMap { $0 } ?? 1000
            let concurrency = tuning.last.flatMap { $0 } ?? 2
            do {
                let queue = try TKPostgresOperationQueue(name: arguments[1], url: arguments[0])
                let pid = getpid()
                try queue.register("work", payload: Work.self) { work, context in
                    let run = "\(context.operationID) \(context.token) \(pid)"
                    log.append("start \(run)")
                    TKThread.sleep(for: .milliseconds(Int64(work.milliseconds)))
                    let giveUp = ContinuousClock.now + .seconds(60)
                    while true {
                        do {
                            try context.fencedWrite("\(pid)", resource: "op-\(context.operationID)")
                            log.append("effect \(run)")
                            return
                        } catch let error as TKError where error.code == .notLockOwner {
                            log.append("refused \(run)")
                            throw error
                        } catch {
                            log.append("lost \(run)")
                            if ContinuousClock.now >= giveUp { throw error }
                            TKThread.sleep(for: .milliseconds(50))
                        }
                    }
                }
                _ = try queue.startWorker(
                    concurrency: concurrency, lease: .milliseconds(Int64(leaseMilliseconds)), pollInterval: .milliseconds(200)
                ) { settled in
                    log.append(
                        "done \(settled.operationID) \(settled.token) \(pid) \(settled.accepted ? "yes" : "no") \(settled.state ?? "-")")
                }
                Console.out("    worker \(pid): ready")
                while true { TKThread.sleep(for: .seconds(3600)) }
            } catch {
                Console.err("pgqueue-worker: \(error)")
                return 1
            }
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
