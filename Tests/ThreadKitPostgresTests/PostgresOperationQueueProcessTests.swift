// TKPostgresOperationQueue across worker processes and through their failures: kill -9 of a worker
// mid-operation (its lease expires, another worker reruns the operation with a higher token), a
// worker paused past its lease (SIGSTOP, as a long GC pause or a partition would) whose fenced
// write and result are refused when it resumes, and workers cut off from the server by a proxy
// that holds their packets, or drops them until their connections break. Judged by the append-only log the workers'
// handlers write (`threadkit-postgres tour --child pgqueue-worker`, the tour's worker:
// Sources/threadkit-postgres/PostgresQueueScenario.swift) and by psql, never by the library's own answers.
#if Postgres
    import Foundation
    import ThreadKit
    import ThreadKitPostgres
    import XCTest

    final class PostgresOperationQueueProcessTests: XCTestCase {
        struct Work: Codable { var milliseconds: Int }

        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        func temporaryLog() -> String {
            FileManager.default.temporaryDirectory.appendingPathComponent("tk-pgqueue-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log")
                .path
        }

        /// The log's lines, split into words.
        func lines(_ log: String) throws -> [[Substring]] {
            try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        }

        /// Polls psql until `sql` prints `expected` (or the deadline passes); what it printed last.
        @discardableResult
        func waitFor(_ sql: String, _ expected: String, seconds: Double = 120) throws -> String {
            let deadline = Date().addingTimeInterval(seconds)
            var last = ""
            while Date() < deadline {
                last = try PostgresTestServer.psql(sql)
                if last == expected { return last }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return last
        }

        /// The verdict of the log and of psql (never of the library): every operation is `finished`
        /// in the table, with the token of its last run in the log (tokens of one operation strictly
        /// increase in log order); that run's fenced write took effect (an "effect" line with that
        /// token, and threadkit_fenced holds it); no operation has two accepted settlements, and one
        /// without an accepted "done" line was finished by `killed`, killed after its commit and
        /// before it could write the line.
        func judge(_ log: String, ids: [Int64], killed: String? = nil) throws -> (reruns: Int, refused: Int) {
            var starts: [Int64: [(token: Int64, pid: Substring)]] = [:]
            var effects: [Int64: Set<Int64>] = [:]
            var accepted: [Int64: [Int64]] = [:]
            var refused = 0
            for words in try lines(log) {
                guard words.count >= 4, let id = Int64(words[1]), let token = Int64(words[2]) else { continue }
                switch words[0] {
                case "start":
                    if let last = starts[id]?.last?.token {
                        XCTAssertGreaterThan(token, last, "operation \(id): token \(token) after \(last)")
                    }
                    starts[id, default: []].append((token, words[3]))
                case "effect": effects[id, default: []].insert(token)
                case "refused": refused += 1
                case "done" where words.count == 6:
                    if words[4] == "yes" {
                        XCTAssertEqual(words[5], "finished", "operation \(id)")
                        accepted[id, default: []].append(token)
                    } else {
                        refused += 1
                    }
                default: break
                }
            }
            let idList = ids.map(String.init).joined(separator: ",")
            var table: [Int64: (state: String, token: Int64)] = [:]
            for line in try PostgresTestServer.psql("SELECT id, state, token FROM threadkit_ops WHERE id IN (\(idList))").split(
                separator: "\n")
            {
                let fields = line.split(separator: "|")
                guard fields.count == 3, let id = Int64(fields[0]), let token = Int64(fields[2]) else { continue }
                table[id] = (String(fields[1]), token)
            }
            var fenced: [Int64: Int64] = [:]
            for line in try PostgresTestServer.psql(
                "SELECT substr(resource, 4), token FROM threadkit_fenced WHERE resource IN ("
                    + ids.map { "'op-\($0)'" }.joined(separator: ",") + ")"
            ).split(separator: "\n") {
                let fields = line.split(separator: "|")
                if fields.count == 2, let id = Int64(fields[0]), let token = Int64(fields[1]) { fenced[id] = token }
            }
            var reruns = 0
            for id in ids {
                guard let row = table[id] else {
                    XCTFail("operation \(id) is not in the table")
                    continue
                }
                XCTAssertEqual(row.state, "finished", "operation \(id)")
                let last = starts[id]?.last
                XCTAssertEqual(row.token, last?.token, "operation \(id): finished with a token that is not its last run's")
                XCTAssertTrue(effects[id]?.contains(row.token) == true, "operation \(id): the finishing run's effect is missing")
                XCTAssertEqual(fenced[id], row.token, "operation \(id): the fenced value is not the finishing run's")
                let tokens = accepted[id] ?? []
                XCTAssertLessThanOrEqual(tokens.count, 1, "operation \(id): accepted settlements \(tokens)")
                if let token = tokens.first {
                    XCTAssertEqual(token, row.token, "operation \(id): the accepted settlement is not the finishing run")
                } else {
                    XCTAssertTrue(killed != nil && last?.pid == killed.map { Substring($0) }, "operation \(id): no accepted settlement")
                }
                if (starts[id]?.count ?? 0) > 1 { reruns += 1 }
            }
            return (reruns, refused)
        }

        /// Three worker processes; one is killed with SIGKILL while it runs operations. Their leases
        /// expire, the others rerun them with higher tokens, and every operation ends exactly once.
        func testKill9OfAWorkerMidOperationReRunsItWithAHigherToken() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let log = temporaryLog()
            defer { try? FileManager.default.removeItem(atPath: log) }
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            let operations = try (0..<40).map { _ in try TKPostgresOperation(kind: "work", payload: Work(milliseconds: 150)) }
            try queue.addOperations(operations, waitUntilFinished: false)
            let ids = operations.map { $0.id! }
            let children = try (0..<3).map { _ in try PostgresChild(tourChild: "pgqueue-worker", [url, name, log, "1200", "3"]) }
            defer { for child in children where child.process.isRunning { child.kill9() } }
            for child in children { XCTAssertNotNil(child.waitForLine(startingWith: "    worker"), "a worker did not start") }
            // kill the first worker while it has runs started and not settled
            let victim = String(children[0].process.processIdentifier)
            let deadline = Date().addingTimeInterval(60)
            var killed = false
            while Date() < deadline && !killed {
                let words = try lines(log)
                let started = Set(words.filter { $0.first == "start" && $0[3] == victim }.map { $0[1] })
                let done = Set(words.filter { $0.first == "done" && $0[3] == victim }.map { $0[1] })
                if !started.subtracting(done).isEmpty && done.count >= 2 {
                    children[0].kill9()
                    killed = true
                }
                Thread.sleep(forTimeInterval: 0.002)
            }
            XCTAssertTrue(killed, "the victim never had a run in progress")
            let idList = ids.map(String.init).joined(separator: ",")
            XCTAssertEqual(
                try waitFor("SELECT count(*) FROM threadkit_ops WHERE id IN (\(idList)) AND state = 'finished'", "40"), "40")
            let verdict = try judge(log, ids: ids, killed: victim)
            XCTAssertGreaterThanOrEqual(verdict.reruns, 1, "no operation was rerun after the kill")
        }

        /// A server restart while two workers run: no committed operation is lost, none is accepted
        /// twice, and the workers reconnect by themselves and finish the rest.
        func testServerRestartLosesNoCommittedOperation() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let accepted = NSLock()
            // safety: `acceptedRuns` is written and read under `accepted` only.
            nonisolated(unsafe) var acceptedRuns: [Int64: Int] = [:]
            let queues = try (0..<2).map { _ -> TKPostgresOperationQueue in
                let queue = try TKPostgresOperationQueue(name: name, url: url)
                try queue.register("work", payload: Work.self) { work, _ in
                    Thread.sleep(forTimeInterval: Double(work.milliseconds) / 1000)
                }
                return queue
            }
            let workers = try queues.map {
                try $0.startWorker(concurrency: 2, lease: .seconds(5), pollInterval: .milliseconds(100)) { settled in
                    if settled.accepted { accepted.withLock { acceptedRuns[settled.operationID, default: 0] += 1 } }
                }
            }
            defer { for worker in workers { worker.shutdown(before: .now + .seconds(10)) } }
            let operations = try (0..<30).map { _ in try TKPostgresOperation(kind: "work", payload: Work(milliseconds: 40)) }
            try queues[0].addOperations(operations, waitUntilFinished: false)
            let idList = operations.map { String($0.id!) }.joined(separator: ",")
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline,
                try Int(PostgresTestServer.psql("SELECT count(*) FROM threadkit_ops WHERE id IN (\(idList)) AND state = 'finished'")) ?? 0
                    < 8
            {
                Thread.sleep(forTimeInterval: 0.01)
            }
            try PostgresTestServer.restart()
            XCTAssertEqual(try PostgresTestServer.psql("SELECT count(*) FROM threadkit_ops WHERE id IN (\(idList))"), "30")
            XCTAssertEqual(
                try waitFor("SELECT count(*) FROM threadkit_ops WHERE id IN (\(idList)) AND state = 'finished'", "30"), "30")
            accepted.withLock {
                for (id, count) in acceptedRuns { XCTAssertEqual(count, 1, "operation \(id) was accepted \(count) times") }
            }
        }

        /// A queue on the test server; a worker (`cut`) whose connections go through `proxy`, which
        /// the test cuts off; one operation of 1.5 s (`id`) that the cut worker has started; the log
        /// the handlers write. `close()` ends what it started.
        struct CutOffRun {
            /// URL QUEUE LOG of a worker that reaches the server directly.
            let direct: [String]
            var log: String { direct[2] }
            let proxy: PausableProxy
            let cut: PostgresChild
            let id: Int64
            var pid: String { String(cut.process.processIdentifier) }

            /// Another worker of the queue, not cut off (lease 600 ms, one run at a time).
            func startOtherWorker() throws -> PostgresChild {
                try PostgresChild(tourChild: "pgqueue-worker", direct + ["600", "1"])
            }

            func close() {
                if cut.process.isRunning { cut.kill9() }
                proxy.close()
                try? FileManager.default.removeItem(atPath: log)
            }
        }

        func startCutOffRun(_ function: String = #function) throws -> CutOffRun {
            let server = try PostgresTestServer.info()
            let name = uniqueName(function)
            let log = temporaryLog()
            let proxy = try PausableProxy(upstreamPort: server.port)
            let proxied = server.url.replacingOccurrences(of: ":\(server.port)/", with: ":\(proxy.port)/")
            XCTAssertNotEqual(proxied, server.url, "the test server's URL names no port to proxy")
            let queue = try TKPostgresOperationQueue(name: name, url: server.url)
            let cut = try PostgresChild(tourChild: "pgqueue-worker", [proxied, name, log, "600", "1"])
            XCTAssertNotNil(cut.waitForLine(startingWith: "    worker"))
            let id = try queue.addOperation(try TKPostgresOperation(kind: "work", payload: Work(milliseconds: 1500)))
            let run = CutOffRun(direct: [server.url, name, log], proxy: proxy, cut: cut, id: id)
            try waitForLine(log, "start", from: run.pid)
            return run
        }

        /// Waits (at most 60 s) until the log has a line `word … pid …` (the pid is the 4th word).
        func waitForLine(_ log: String, _ word: Substring, from pid: String) throws {
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, try !lines(log).contains(where: { $0.first == word && $0[3] == pid }) {
                Thread.sleep(forTimeInterval: 0.002)
            }
        }

        /// A worker cut off from the server (its packets held by a proxy) past its lease while it runs
        /// an operation: another worker reruns it with a higher token; when the partition heals, the
        /// cut-off worker's fenced write and result are refused, so only one run finishes with effect.
        func testAWorkerPartitionedPastItsLeaseCannotFinishTheLeaseWithEffect() throws {
            let run = try startCutOffRun()
            defer { run.close() }
            run.proxy.pause()
            let other = try run.startOtherWorker()
            defer { if other.process.isRunning { other.kill9() } }
            XCTAssertEqual(try waitFor("SELECT state FROM threadkit_ops WHERE id = \(run.id)", "finished"), "finished")
            // the cut-off handler has woken meanwhile; its fenced write waits in the proxy
            run.proxy.resume()
            try waitForLine(run.log, "done", from: run.pid)
            let words = try lines(run.log)
            let pid = run.pid
            XCTAssertTrue(words.contains { $0.first == "refused" && $0[3] == pid }, "the cut-off write was not refused: \(words)")
            XCTAssertTrue(words.contains { $0.first == "done" && $0[3] == pid && $0[4] == "no" }, "\(words)")
            let verdict = try judge(run.log, ids: [run.id])
            XCTAssertEqual(verdict.reruns, 1)
            XCTAssertEqual(verdict.refused, 2)
        }

        /// A worker whose packets are dropped (by the proxy) past its lease while it runs an
        /// operation: another worker reruns it with a higher token and finishes it. When the
        /// partition heals, the cut-off worker's connections are broken (as after TCP gives up); its
        /// handler, which insists on its side effect, writes again on a new connection and is refused
        /// by the fence, and its result is refused too: one run finished with effect.
        func testAWorkerWhosePacketsAreDroppedCannotFinishTheLeaseWithEffect() throws {
            let run = try startCutOffRun()
            defer { run.close() }
            // The handler now sleeps 1.5 s; its fenced write comes after the drop starts, and the
            // other worker can claim only after the cut-off lease (0.6 s) expired, then works 1.5 s:
            // the cut-off write is sent while packets are dropped, whatever the machine's speed.
            run.proxy.dropPackets()
            let other = try run.startOtherWorker()
            defer { if other.process.isRunning { other.kill9() } }
            XCTAssertEqual(try waitFor("SELECT state FROM threadkit_ops WHERE id = \(run.id)", "finished"), "finished")
            XCTAssertGreaterThanOrEqual(run.proxy.heal(), 1, "no connection of the cut-off worker lost bytes")
            try waitForLine(run.log, "done", from: run.pid)
            let words = try lines(run.log)
            let pid = run.pid
            let otherPID = String(other.process.processIdentifier)
            XCTAssertTrue(words.contains { $0.first == "lost" && $0[3] == pid }, "the cut-off write did not fail on the way: \(words)")
            XCTAssertTrue(words.contains { $0.first == "refused" && $0[3] == pid }, "the cut-off write was not refused: \(words)")
            XCTAssertFalse(words.contains { $0.first == "effect" && $0[3] == pid }, "the cut-off write took effect: \(words)")
            XCTAssertTrue(words.contains { $0.first == "done" && $0[3] == pid && $0[4] == "no" }, "\(words)")
            XCTAssertTrue(words.contains { $0.first == "done" && $0[3] == otherPID && $0[4] == "yes" }, "\(words)")
            XCTAssertEqual(words.filter { $0.first == "effect" }.count, 1, "effects: \(words)")
            let verdict = try judge(run.log, ids: [run.id])
            XCTAssertEqual(verdict.reruns, 1)
            XCTAssertEqual(verdict.refused, 2)
        }

        /// A worker paused (SIGSTOP) past its lease while it runs an operation: another worker reruns
        /// it with a higher token and finishes it; the paused one, resumed, has its fenced write and
        /// its result refused.
        func testAWorkerPausedPastItsLeaseHasItsFencedWriteAndResultRefused() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let log = temporaryLog()
            defer { try? FileManager.default.removeItem(atPath: log) }
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            let stale = try PostgresChild(tourChild: "pgqueue-worker", [url, name, log, "600", "1"])
            defer { if stale.process.isRunning { stale.kill9() } }
            XCTAssertNotNil(stale.waitForLine(startingWith: "    worker"))
            let operation = try TKPostgresOperation(kind: "work", payload: Work(milliseconds: 1500))
            let id = try queue.addOperation(operation)
            let pid = String(stale.process.processIdentifier)
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, try !lines(log).contains(where: { $0.first == "start" && $0[3] == pid }) {
                Thread.sleep(forTimeInterval: 0.002)
            }
            kill(stale.process.processIdentifier, SIGSTOP)
            let fresh = try PostgresChild(tourChild: "pgqueue-worker", [url, name, log, "600", "1"])
            defer { if fresh.process.isRunning { fresh.kill9() } }
            XCTAssertEqual(try waitFor("SELECT state FROM threadkit_ops WHERE id = \(id)", "finished"), "finished")
            kill(stale.process.processIdentifier, SIGCONT)
            let freshPID = String(fresh.process.processIdentifier)
            // the stale run's fenced write and its settlement are refused
            let resumed = Date().addingTimeInterval(60)
            while Date() < resumed, try !lines(log).contains(where: { $0.first == "done" && $0[3] == pid }) {
                Thread.sleep(forTimeInterval: 0.01)
            }
            let words = try lines(log)
            XCTAssertTrue(words.contains { $0.first == "refused" && $0[3] == pid }, "the stale write was not refused: \(words)")
            XCTAssertTrue(words.contains { $0.first == "done" && $0[3] == pid && $0[4] == "no" }, "\(words)")
            XCTAssertTrue(words.contains { $0.first == "done" && $0[3] == freshPID && $0[4] == "yes" }, "\(words)")
            let verdict = try judge(log, ids: [id])
            XCTAssertEqual(verdict.reruns, 1)
            XCTAssertEqual(verdict.refused, 2)
        }
    }
#endif
