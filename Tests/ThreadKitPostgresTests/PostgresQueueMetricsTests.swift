// TKPostgresQueueMetrics (ThreadKitMetrics) against a real server: a queue brought into a known
// state (operations finished, dead, retried, running, cancelled, scheduled, ready) exports those
// counts as swift-metrics gauges and counters labelled with the queue's name, counters grow by the
// difference between reports, and `threadkit-postgres queue NAME` lists the same figures. Judged by
// what the test itself added and waited for, by psql counting the table, and by swift-metrics' own
// recording factory (MetricsTestKit).
#if Postgres
    import Foundation
    import MetricsTestKit
    import ThreadKit
    import ThreadKitMetrics
    import ThreadKitPostgres
    import XCTest

    final class PostgresQueueMetricsTests: XCTestCase {
        struct Empty: Codable, Sendable {}

        /// psql's count of the queue's operations in `condition`.
        func count(_ queue: String, _ condition: String) throws -> Int {
            Int(
                try PostgresTestServer.psql(
                    "SELECT count(*) FROM threadkit_ops o JOIN threadkit_queues q ON q.id = o.queue_id WHERE q.name = '\(queue)' AND \(condition)"
                )) ?? -1
        }

        /// `threadkit-postgres queue NAME`'s figures, from its statistics line.
        func listing(_ name: String, url: String) throws -> [String: Int] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                .appendingPathComponent("threadkit-postgres")
            process.arguments = ["queue", name, "--limit", "0"]
            var environment = ProcessInfo.processInfo.environment
            environment["TK_POSTGRES_URL"] = url
            process.environment = environment
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0, "threadkit-postgres queue failed")
            let text = String(decoding: data, as: UTF8.self)
            guard let line = text.split(separator: "\n").first(where: { $0.contains("depth ") }) else {
                XCTFail("no statistics line in: \(text)")
                return [:]
            }
            let words = line.split(whereSeparator: { " (),".contains($0) }).map(String.init)
            var figures: [String: Int] = [:]
            for (word, value) in zip(words, words.dropFirst()) {
                if let number = Int(value) { figures[word] = number }
            }
            return figures
        }

        func testQueueStatisticsAreExportedAndMatchTheListing() throws {
            let url = try PostgresTestServer.info().url
            let name = "metrics-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            let started = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            try queue.register("ok", payload: Empty.self) { _, _ in }
            try queue.register("fail", payload: Empty.self) { _, _ in throw TKError(.invalidArgument, "failing on purpose") }
            try queue.register("block", payload: Empty.self) { _, _ in
                started.signal()
                _ = release.wait(timeout: .now() + 120)
            }
            let worker = try queue.startWorker(concurrency: 4, lease: .seconds(30), pollInterval: .milliseconds(100))
            defer {
                release.signal()
                _ = try? queue.cancelAllOperations()
                worker.shutdown(before: .now + .seconds(10))
            }
            func make(_ kind: String, _ change: (TKPostgresOperation) -> Void = { _ in }) throws -> TKPostgresOperation {
                let operation = try TKPostgresOperation(kind: kind, payload: Empty())
                change(operation)
                return operation
            }
            let finished = try (0..<3).map { _ in try make("ok") }
            let dead = try (0..<2).map { _ in try make("fail") { $0.maxAttempts = 1 } }
            let retried = try make("fail") {
                $0.maxAttempts = 2
                $0.retryBackoff = .seconds(3600)
            }
            let blocking = try make("block")
            let scheduled = try make("ok") { $0.delay = .seconds(3600) }
            let cancelled = try make("ok") { $0.delay = .seconds(3600) }
            let idle = try (0..<2).map { _ in try make("unregistered") } // no worker runs this kind: ready, waiting
            let addedFrom = Date()
            try queue.addOperations(finished + dead + [retried, blocking, scheduled, cancelled] + idle, waitUntilFinished: false)
            let added = Date()
            XCTAssertTrue(try queue.cancel(cancelled.id!))
            for operation in finished + dead {
                XCTAssertNotNil(try queue.waitUntilFinished(operation.id!, before: .now + .seconds(60)), "operation \(operation.id!)")
            }
            XCTAssertEqual(started.wait(timeout: .now() + 60), .success, "the blocking operation did not start")
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, try count(name, "o.id = \(retried.id!) AND state = 'pending' AND attempt = 1") != 1 {
                Thread.sleep(forTimeInterval: 0.01)
            }
            // The state the test made, as psql counts it.
            XCTAssertEqual(try count(name, "state = 'pending'"), 4) // retried, scheduled, two idle
            XCTAssertEqual(try count(name, "state = 'running'"), 1)
            XCTAssertEqual(try count(name, "state = 'dead'"), 2)
            XCTAssertEqual(try count(name, "state = 'finished'"), 3)
            XCTAssertEqual(try count(name, "state = 'cancelled'"), 1)

            let factory = TestMetrics()
            let metrics = TKPostgresQueueMetrics(queues: [queue, queue], factory: factory, interval: .seconds(3600))
            XCTAssertEqual(metrics.queues.count, 1, "one queue object per name")
            let reportFrom = Date()
            let read = try metrics.report()
            let reportTo = Date()
            XCTAssertEqual(read[name]?.depth, 4)
            let labels = [("name", name)]
            let gauge = { (label: String) throws -> Double? in try factory.expectGauge(label, labels).lastValue }
            let counter = { (label: String) throws -> Int64 in try factory.expectCounter(label, labels).totalValue }
            typealias N = TKPostgresQueueMetrics.Name
            XCTAssertEqual(try gauge(N.depth), 4)
            XCTAssertEqual(try gauge(N.ready), 2)
            XCTAssertEqual(try gauge(N.running), 1)
            XCTAssertEqual(try gauge(N.retried), 1)
            XCTAssertEqual(try gauge(N.dead), 2)
            XCTAssertEqual(try counter(N.finished), 3)
            XCTAssertEqual(try counter(N.cancelled), 1)
            XCTAssertEqual(try counter(N.readErrors), 0)
            // the oldest waiting operation was added between addedFrom and added: never younger than
            // the time since `added`, never older than the time since `addedFrom` (1 s for the clocks'
            // rounding: the server's and this process's are the same host's)
            let age = try XCTUnwrap(try gauge(N.oldestAge))
            XCTAssertGreaterThanOrEqual(age, reportFrom.timeIntervalSince(added) - 0.001)
            XCTAssertLessThanOrEqual(age, reportTo.timeIntervalSince(addedFrom) + 1)

            // `threadkit-postgres queue NAME` shows the same figures (nothing changes meanwhile: the
            // retry and the scheduled operation wait an hour, the blocking handler waits for us).
            let listed = try listing(name, url: url)
            XCTAssertEqual(listed["depth"], 4)
            XCTAssertEqual(listed["ready"], 2)
            XCTAssertEqual(listed["running"], 1)
            XCTAssertEqual(listed["retried"], 1)
            XCTAssertEqual(listed["dead"], 2)
            XCTAssertEqual(listed["finished"], 3)
            XCTAssertEqual(listed["cancelled"], 1)

            // The blocking operation finishes: the counter grows by 1, not by the new total.
            release.signal()
            XCTAssertEqual(try queue.waitUntilFinished(blocking.id!, before: .now + .seconds(60))?.state, .finished)
            try metrics.report()
            XCTAssertEqual(try counter(N.finished), 4)
            XCTAssertEqual(try gauge(N.running), 0)
            XCTAssertEqual(try gauge(N.depth), 4)
            let listedAfter = try listing(name, url: url)
            XCTAssertEqual(listedAfter["finished"], 4)
            XCTAssertEqual(listedAfter["running"], 0)
        }

        /// The reporter thread reports by itself (once at start), and stops.
        func testTheReporterThreadReportsAtStart() throws {
            let url = try PostgresTestServer.info().url
            let name = "metrics-start-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let queue = try TKPostgresOperationQueue(name: name, url: url)
            try queue.addOperations(
                try (0..<3).map { _ in try TKPostgresOperation(kind: "nobody", payload: Empty()) }, waitUntilFinished: false)
            defer { _ = try? queue.cancelAllOperations() }
            let factory = TestMetrics()
            let metrics = TKPostgresQueueMetrics.start(queues: [queue], interval: .seconds(3600), factory: factory)
            defer { metrics.stop() }
            let depth = try factory.expectGauge(TKPostgresQueueMetrics.Name.depth, [("name", name)])
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, depth.lastValue != 3 { Thread.sleep(forTimeInterval: 0.01) }
            XCTAssertEqual(depth.lastValue, 3)
        }
    }
#endif
