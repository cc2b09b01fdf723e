// TKPostgresOperationQueue's semantics against a real server, workers in this process (several
// workers, each with its own sessions, stand in for hosts): add and wait (callback, blocking,
// async), dependencies across workers and cycles refused, priority and QoS order, the cluster-wide
// limit, cancel seen by a running handler, retries with backoff then dead, scheduled operations,
// barriers, graceful shutdown, statistics, names, the schema's version and its idempotent migration. The judges are a log
// the handlers write under a lock, and psql reading the tables.
#if Postgres
    import Foundation
    import ThreadKit
    import ThreadKitPostgres
    import XCTest

    /// What handlers record, in the order they record it (the tests' judge).
    // safety: `events` is guarded by `lock`.
    final class EventLog: @unchecked Sendable {
        private let lock = NSLock()
        private var events: [(String, Int64, Date)] = [] // guarded by `lock`
        func add(_ what: String, _ id: Int64) { lock.withLock { events.append((what, id, Date())) } }
        var all: [(String, Int64, Date)] { lock.withLock { events } }
        func index(_ what: String, _ id: Int64) -> Int? { all.firstIndex { $0.0 == what && $0.1 == id } }
        func date(_ what: String, _ id: Int64) -> Date? { all.first { $0.0 == what && $0.1 == id }?.2 }
        func count(_ what: String) -> Int { all.filter { $0.0 == what }.count }
    }

    struct Empty: Codable, Sendable {}
    struct Sleep: Codable, Sendable { var milliseconds: Int }

    final class PostgresOperationQueueTests: XCTestCase {
        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        /// A queue object with kind "log" (records start/end, sleeps `milliseconds`) registered.
        func openQueue(_ name: String, _ log: EventLog) throws -> TKPostgresOperationQueue {
            let queue = try TKPostgresOperationQueue(name: name, url: try PostgresTestServer.info().url)
            try queue.register("log", payload: Sleep.self) { sleep, context in
                log.add("start", context.operationID)
                if sleep.milliseconds > 0 { Thread.sleep(forTimeInterval: Double(sleep.milliseconds) / 1000) }
                log.add("end", context.operationID)
            }
            return queue
        }

        func count(_ sql: String) throws -> Int { Int(try PostgresTestServer.psql(sql)) ?? -1 }

        func testAddedOperationsRunOnceAndCompletionIsObservedThreeWays() async throws {
            let log = EventLog()
            let name = uniqueName()
            let queue = try openQueue(name, log)
            let worker = try queue.startWorker(concurrency: 4)
            defer { worker.shutdown(before: .now + .seconds(10)) }
            let operations = try (0..<20).map { _ in try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0)) }
            let outcomes = try queue.addOperations(operations, waitUntilFinished: true)
            XCTAssertEqual(outcomes.map(\.state), Array(repeating: .finished, count: 20))
            for operation in operations { XCTAssertEqual(log.all.filter { $0.0 == "start" && $0.1 == operation.id }.count, 1) }
            // another object (another host, for all it knows) observes by callback and async wait
            let observer = try TKPostgresOperationQueue(name: name, url: try PostgresTestServer.info().url)
            let one = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 50))
            let id = try queue.addOperation(one)
            let called = expectation(description: "callback")
            try observer.onFinished(id) { outcome in
                XCTAssertEqual(outcome.state, .finished)
                called.fulfill()
            }
            let awaited = try await observer.finished(id)
            XCTAssertEqual(awaited.state, .finished)
            XCTAssertGreaterThan(awaited.token, 0)
            await fulfillment(of: [called], timeout: 30)
            let queueID = try PostgresTestServer.psql("SELECT id FROM threadkit_queues WHERE name = '\(name)'")
            XCTAssertEqual(try count("SELECT count(*) FROM threadkit_ops WHERE queue_id = \(queueID) AND state = 'finished'"), 21)
        }

        func testDependenciesAcrossWorkersAreRespectedAndCyclesAreRefused() throws {
            let log = EventLog()
            let name = uniqueName()
            let queues = try (0..<3).map { _ in try openQueue(name, log) }
            let workers = try queues.map { try $0.startWorker(concurrency: 3) }
            defer { for worker in workers { worker.shutdown(before: .now + .seconds(10)) } }
            // a layered DAG: 5 layers × 6, each depending on 2 of the layer before
            var layers: [[TKPostgresOperation]] = []
            var edges: [(TKPostgresOperation, TKPostgresOperation)] = []
            for layer in 0..<5 {
                var row: [TKPostgresOperation] = []
                for index in 0..<6 {
                    let operation = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 5))
                    if layer > 0 {
                        for dependency in [layers[layer - 1][index], layers[layer - 1][(index + 1) % 6]] {
                            try operation.addDependency(dependency)
                            edges.append((dependency, operation))
                        }
                    }
                    row.append(operation)
                }
                layers.append(row)
            }
            // added in reverse (dependents first): the queue orders the batch itself
            let all = Array(layers.joined().reversed())
            try queues[0].addOperations(all, waitUntilFinished: true)
            for (dependency, dependent) in edges {
                let end = try XCTUnwrap(log.index("end", dependency.id!))
                let start = try XCTUnwrap(log.index("start", dependent.id!))
                XCTAssertLessThan(end, start, "operation \(dependent.id!) started before its dependency \(dependency.id!) ended")
            }
            // a dependency on an operation added earlier, by id (as another host would)
            let later = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            try later.addDependency(id: layers[4][0].id!)
            _ = try queues[1].addOperations([later], waitUntilFinished: true)
            // a cycle is refused and nothing is added
            let before = try count("SELECT count(*) FROM threadkit_ops")
            let a = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            let b = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            let c = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            try a.addDependency(b)
            try b.addDependency(c)
            try c.addDependency(a)
            XCTAssertThrowsError(try queues[0].addOperations([a, b, c], waitUntilFinished: false)) { error in
                XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
                XCTAssertTrue("\(error)".contains("cycle"), "\(error)")
            }
            XCTAssertNil(a.id)
            // a dependency on an unknown id is refused too, and one added after the operation was added
            let orphan = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            try orphan.addDependency(id: 9_000_000_000_000)
            XCTAssertThrowsError(try queues[0].addOperation(orphan)) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
            XCTAssertThrowsError(try later.addDependency(a)) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
            XCTAssertEqual(try count("SELECT count(*) FROM threadkit_ops"), before)
        }

        func testPriorityThenQoSThenFIFOOrder() throws {
            let log = EventLog()
            let queue = try openQueue(uniqueName(), log)
            var expected: [(Int, Int, Int, TKPostgresOperation)] = []
            let priorities: [TKOperation.QueuePriority] = [.low, .veryHigh, .normal, .high, .veryLow, .normal]
            let classes: [TKQualityOfService] = [.background, .userInitiated, .utility]
            var index = 0
            for priority in priorities {
                for qos in classes {
                    let operation = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
                    operation.queuePriority = priority
                    operation.qualityOfService = qos
                    expected.append(
                        (priority.rawValue, [TKQualityOfService.background: 1, .utility: 2, .userInitiated: 4][qos]!, -index, operation))
                    index += 1
                }
            }
            try queue.addOperations(expected.map(\.3), waitUntilFinished: false)
            let worker = try queue.startWorker(concurrency: 1)
            defer { worker.shutdown(before: .now + .seconds(10)) }
            for operation in expected.map(\.3) { XCTAssertNotNil(try queue.waitUntilFinished(operation.id!, before: .now + .seconds(60))) }
            let order = log.all.filter { $0.0 == "start" }.map(\.1)
            let sorted = expected.sorted { ($0.0, $0.1, $0.2) > ($1.0, $1.1, $1.2) }.map { $0.3.id! }
            XCTAssertEqual(order, sorted)
        }

        func testMaxConcurrentOperationCountHoldsAcrossWorkers() throws {
            let name = uniqueName()
            let url = try PostgresTestServer.info().url
            let running = ManagedAtomicCounter()
            let queues = try (0..<3).map { _ -> TKPostgresOperationQueue in
                let queue = try TKPostgresOperationQueue(name: name, url: url)
                try queue.register("busy", payload: Sleep.self) { sleep, _ in
                    running.enter()
                    Thread.sleep(forTimeInterval: Double(sleep.milliseconds) / 1000)
                    running.leave()
                }
                return queue
            }
            try queues[0].setMaxConcurrentOperationCount(2)
            XCTAssertEqual(try queues[1].maxConcurrentOperationCount(), 2)
            XCTAssertThrowsError(try queues[0].setMaxConcurrentOperationCount(0))
            let workers = try queues.map { try $0.startWorker(concurrency: 4) }
            defer { for worker in workers { worker.shutdown(before: .now + .seconds(10)) } }
            let operations = try (0..<24).map { _ in try TKPostgresOperation(kind: "busy", payload: Sleep(milliseconds: 30)) }
            try queues[0].addOperations(operations, waitUntilFinished: true)
            XCTAssertEqual(running.maximum, 2, "the limit 2 was exceeded or never reached")
        }

        func testCancelIsSeenByARunningHandlerAndEndsPendingOnes() throws {
            let name = uniqueName()
            let url = try PostgresTestServer.info().url
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            let started = DispatchSemaphore(value: 0)
            let sawCancel = NSLock()
            // safety: `seen` is written and read under `sawCancel` only.
            nonisolated(unsafe) var seen = false
            try queue.register("spin", payload: Empty.self) { _, context in
                started.signal()
                let deadline = Date().addingTimeInterval(60)
                while !context.isCancelled && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
                sawCancel.withLock { seen = context.isCancelled }
                throw TKError(.invalidArgument, "stopped: cancelled")
            }
            try queue.register("log", payload: Sleep.self) { _, _ in }
            let worker = try queue.startWorker(concurrency: 1)
            defer { worker.shutdown(before: .now + .seconds(10)) }
            let spinning = try TKPostgresOperation(kind: "spin", payload: Empty())
            let waiting = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            let dependent = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            try dependent.addDependency(waiting)
            try waiting.addDependency(spinning)
            try queue.addOperations([spinning, waiting, dependent], waitUntilFinished: false)
            XCTAssertEqual(started.wait(timeout: .now() + 60), .success)
            XCTAssertTrue(try queue.cancel(waiting.id!))
            XCTAssertEqual(try queue.waitUntilFinished(waiting.id!, before: .now + .seconds(30))?.state, .cancelled)
            // the dependent is ready now, but the worker's one slot is busy: it waits
            let other = try TKPostgresOperationQueue(name: name, url: url) // another host cancels the running one
            XCTAssertTrue(try other.cancel(spinning.id!))
            let outcome = try XCTUnwrap(try queue.waitUntilFinished(spinning.id!, before: .now + .seconds(30)))
            XCTAssertEqual(outcome.state, .cancelled)
            XCTAssertTrue(sawCancel.withLock { seen })
            XCTAssertEqual(try queue.waitUntilFinished(dependent.id!, before: .now + .seconds(30))?.state, .finished)
            XCTAssertFalse(try queue.cancel(spinning.id!))
        }

        func testFailuresAreRetriedWithBackoffThenDeadWithTheError() throws {
            let log = EventLog()
            let queue = try TKPostgresOperationQueue(name: uniqueName(), url: try PostgresTestServer.info().url)
            try queue.register("fail", payload: Empty.self) { _, context in
                log.add("run", Int64(context.attempt))
                throw TKError(.invalidArgument, "boom \(context.attempt)")
            }
            let worker = try queue.startWorker(concurrency: 2, pollInterval: .milliseconds(20))
            defer { worker.shutdown(before: .now + .seconds(10)) }
            let operation = try TKPostgresOperation(kind: "fail", payload: Empty())
            operation.maxAttempts = 3
            operation.retryBackoff = .milliseconds(100)
            let outcome = try XCTUnwrap(try queue.addOperations([operation], waitUntilFinished: true).first)
            XCTAssertEqual(outcome.state, .dead)
            XCTAssertEqual(outcome.attempts, 3)
            XCTAssertEqual(outcome.lastError, "boom 3")
            let runs = log.all
            XCTAssertEqual(runs.map(\.1), [1, 2, 3])
            // never early: 100 ms, then 200 ms
            XCTAssertGreaterThanOrEqual(runs[1].2.timeIntervalSince(runs[0].2), 0.1)
            XCTAssertGreaterThanOrEqual(runs[2].2.timeIntervalSince(runs[1].2), 0.2)
            let statistics = try queue.statistics()
            XCTAssertEqual(statistics.dead, 1)
            XCTAssertEqual(statistics.depth, 0)
            let dead = try queue.operations(states: ["dead"])
            XCTAssertEqual(dead.map(\.lastError), ["boom 3"])
        }

        func testScheduledOperationsNeverStartEarly() throws {
            let log = EventLog()
            let queue = try openQueue(uniqueName(), log)
            let worker = try queue.startWorker(concurrency: 2)
            defer { worker.shutdown(before: .now + .seconds(10)) }
            let delayed = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            delayed.delay = .milliseconds(400)
            let dated = try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))
            let notBefore = Date().addingTimeInterval(0.6)
            dated.notBefore = notBefore
            let added = Date()
            try queue.addOperations([delayed, dated], waitUntilFinished: true)
            XCTAssertGreaterThanOrEqual(try XCTUnwrap(log.date("start", delayed.id!)).timeIntervalSince(added), 0.4)
            XCTAssertGreaterThanOrEqual(try XCTUnwrap(log.date("start", dated.id!)).timeIntervalSince(notBefore), -0.01)
        }

        func testBarrierWaitsForEarlierOperationsAndHoldsLaterOnes() throws {
            let log = EventLog()
            let name = uniqueName()
            let queue = try openQueue(name, log)
            let workers = try [queue.startWorker(concurrency: 4), try openQueue(name, log).startWorker(concurrency: 4)]
            defer { for worker in workers { worker.shutdown(before: .now + .seconds(10)) } }
            let before = try (0..<6).map { _ in try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 20)) }
            try queue.addOperations(before, waitUntilFinished: false)
            let barrier = try TKPostgresOperation.barrier(kind: "log", payload: Sleep(milliseconds: 20))
            try queue.addBarrier(barrier)
            let after = try (0..<6).map { _ in try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0)) }
            try queue.addOperations(after, waitUntilFinished: true)
            XCTAssertEqual(try queue.waitUntilFinished(barrier.id!, before: .now + .seconds(30))?.state, .finished)
            let barrierStart = try XCTUnwrap(log.index("start", barrier.id!))
            let barrierEnd = try XCTUnwrap(log.index("end", barrier.id!))
            for operation in before { XCTAssertLessThan(try XCTUnwrap(log.index("end", operation.id!)), barrierStart) }
            for operation in after { XCTAssertGreaterThan(try XCTUnwrap(log.index("start", operation.id!)), barrierEnd) }
            // one batch: operations, a barrier, operations
            let first = try (0..<4).map { _ in try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 20)) }
            let middle = try TKPostgresOperation.barrier(kind: "log", payload: Sleep(milliseconds: 10))
            let last = try (0..<4).map { _ in try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0)) }
            try queue.addOperations(first + [middle] + last, waitUntilFinished: true)
            let middleStart = try XCTUnwrap(log.index("start", middle.id!))
            let middleEnd = try XCTUnwrap(log.index("end", middle.id!))
            for operation in first { XCTAssertLessThan(try XCTUnwrap(log.index("end", operation.id!)), middleStart) }
            for operation in last { XCTAssertGreaterThan(try XCTUnwrap(log.index("start", operation.id!)), middleEnd) }
            XCTAssertThrowsError(try queue.addBarrier(try TKPostgresOperation(kind: "log", payload: Sleep(milliseconds: 0))))
        }

        func testGracefulShutdownHandsBackWhatIsStillRunning() throws {
            let name = uniqueName()
            let queue = try TKPostgresOperationQueue(name: name, url: try PostgresTestServer.info().url)
            let started = DispatchSemaphore(value: 0)
            try queue.register("long", payload: Empty.self) { _, context in
                started.signal()
                let deadline = Date().addingTimeInterval(60)
                while !context.isCancelled && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
            }
            try queue.register("quick", payload: Empty.self) { _, _ in }
            let worker = try queue.startWorker(concurrency: 2)
            let long = try TKPostgresOperation(kind: "long", payload: Empty())
            let quick = try TKPostgresOperation(kind: "quick", payload: Empty())
            try queue.addOperations([long, quick], waitUntilFinished: false)
            XCTAssertEqual(started.wait(timeout: .now() + 60), .success)
            XCTAssertEqual(try queue.waitUntilFinished(quick.id!, before: .now + .seconds(30))?.state, .finished)
            XCTAssertEqual(worker.shutdown(before: .now + .milliseconds(200)), 1)
            XCTAssertEqual(
                try PostgresTestServer.psql("SELECT state || ' ' || attempt FROM threadkit_ops WHERE id = \(long.id!)"), "pending 0")
            // another worker takes it up
            let next = try queue.startWorker(concurrency: 1)
            defer { next.shutdown(before: .now + .seconds(1)) }
            XCTAssertEqual(started.wait(timeout: .now() + 60), .success)
        }

        func testStatisticsCountEachState() throws {
            let queue = try TKPostgresOperationQueue(name: uniqueName(), url: try PostgresTestServer.info().url)
            let later = try TKPostgresOperation(kind: "x", payload: Empty())
            later.delay = .seconds(3600)
            let waiting = try TKPostgresOperation(kind: "x", payload: Empty())
            try waiting.addDependency(later)
            let ready = try TKPostgresOperation(kind: "x", payload: Empty())
            let gone = try TKPostgresOperation(kind: "x", payload: Empty())
            try queue.addOperations([later, waiting, ready, gone], waitUntilFinished: false)
            XCTAssertTrue(try queue.cancel(gone.id!))
            let statistics = try queue.statistics()
            XCTAssertEqual(statistics.depth, 3)
            XCTAssertEqual(statistics.ready, 1)
            XCTAssertEqual(statistics.running, 0)
            XCTAssertEqual(statistics.cancelled, 1)
            XCTAssertNotNil(statistics.oldestPendingAge)
            XCTAssertEqual(try queue.operations().map(\.id), [later.id!, waiting.id!, ready.id!, gone.id!])
            XCTAssertEqual(try queue.operations(states: ["pending"], after: waiting.id!).map(\.id), [ready.id!])
            XCTAssertEqual(try queue.cancelAllOperations(), 3)
        }

        func testQueueNamesFollowTheLockNameRules() throws {
            let url = try PostgresTestServer.info().url
            XCTAssertThrowsError(try TKPostgresOperationQueue(name: "", url: url)) {
                XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument)
            }
            XCTAssertThrowsError(try TKPostgresOperationQueue(name: "a\u{0}b", url: url)) {
                XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument)
            }
            XCTAssertThrowsError(try TKPostgresOperationQueue(name: String(repeating: "q", count: 1025), url: url))
            let odd = "Ω'; DROP TABLE threadkit_ops; -- \"é\" \(getpid())"
            let decomposed = odd.replacingOccurrences(of: "é", with: "e\u{301}")
            let one = try TKPostgresOperationQueue(name: odd, url: url)
            let two = try TKPostgresOperationQueue(name: decomposed, url: url)
            XCTAssertEqual(one.name, two.name)
            let operation = try TKPostgresOperation(kind: "x", payload: Empty())
            try one.addOperation(operation)
            XCTAssertEqual(try two.operations().map(\.id), [operation.id!])
            XCTAssertThrowsError(try one.register("", payload: Empty.self) { _, _ in })
            XCTAssertThrowsError(try one.startWorker()) // nothing registered
        }

        /// The migration is idempotent: with the version row gone (as if a library that knew no
        /// version had made the tables), four queue objects opened at once run it again over the
        /// existing tables (serialized by the advisory lock), none fails, the version is 1 again and
        /// the operations already stored are untouched.
        func testTheMigrationRunsAgainOverExistingTablesAndKeepsTheirRows() throws {
            let url = try PostgresTestServer.info().url
            let queue = try TKPostgresOperationQueue(name: uniqueName(), url: url)
            let id = try queue.addOperation(try TKPostgresOperation(kind: "nobody", payload: Empty()))
            defer { _ = try? queue.cancelAllOperations() }
            try PostgresTestServer.psql("DELETE FROM threadkit_schema WHERE component = 'operation_queue'")
            defer {
                _ = try? PostgresTestServer.psql(
                    "INSERT INTO threadkit_schema (component, version) VALUES ('operation_queue', 1) ON CONFLICT DO NOTHING")
            }
            let failures = NSLock()
            // safety: `errors` is written and read under `failures` only.
            nonisolated(unsafe) var errors: [String] = []
            let prefix = uniqueName()
            DispatchQueue.concurrentPerform(iterations: 4) { i in
                do { _ = try TKPostgresOperationQueue(name: "\(prefix)-\(i)", url: url) } catch {
                    failures.withLock { errors.append("\(error)") }
                }
            }
            XCTAssertEqual(failures.withLock { errors }, [])
            XCTAssertEqual(try PostgresTestServer.psql("SELECT version FROM threadkit_schema WHERE component = 'operation_queue'"), "1")
            XCTAssertEqual(try PostgresTestServer.psql("SELECT state FROM threadkit_ops WHERE id = \(id)"), "pending")
            XCTAssertNil(try queue.outcome(of: id), "the stored operation changed")
        }

        func testSchemaIsVersionedAndANewerOneIsRefused() throws {
            let url = try PostgresTestServer.info().url
            _ = try TKPostgresOperationQueue(name: uniqueName(), url: url)
            XCTAssertEqual(try PostgresTestServer.psql("SELECT version FROM threadkit_schema WHERE component = 'operation_queue'"), "1")
            try PostgresTestServer.psql("UPDATE threadkit_schema SET version = 99 WHERE component = 'operation_queue'")
            defer { _ = try? PostgresTestServer.psql("UPDATE threadkit_schema SET version = 1 WHERE component = 'operation_queue'") }
            XCTAssertThrowsError(try TKPostgresOperationQueue(name: uniqueName(), url: url)) { error in
                XCTAssertTrue("\(error)".contains("newer"), "\(error)")
            }
        }
    }

    /// Counts handlers inside at once and remembers the most.
    // safety: `inside` and `most` are guarded by `lock`.
    final class ManagedAtomicCounter: @unchecked Sendable {
        private let lock = NSLock()
        private var inside = 0 // guarded by `lock`
        private var most = 0 // guarded by `lock`
        func enter() {
            lock.withLock {
                inside += 1
                most = max(most, inside)
            }
        }
        func leave() { lock.withLock { inside -= 1 } }
        var maximum: Int { lock.withLock { most } }
    }
#endif
