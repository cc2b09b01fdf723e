// TKPostgresLock across processes and through failures, against a real server: 8 processes
// contending (an append-only enter/exit log, judged line by line), kill -9 of a holder,
// pg_terminate_backend of the holder's session with a fenced store refusing its token, and a
// server restart (and a server that stays down) during a wait.
#if Postgres
    import Foundation
    import ThreadKit
    import ThreadKitPostgres
    import XCTest

    final class PostgresLockProcessTests: XCTestCase {
        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        /// 8 processes × 200 acquisitions (× TK_STRESS): the log never shows two holders at once and
        /// the fencing tokens grow strictly in log order.
        func testEightProcessesNeverOverlapAndTokensGrowInLogOrder() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let processes = 8
            let rounds = 200 * max(1, Int(ProcessInfo.processInfo.environment["TK_STRESS"] ?? "1") ?? 1)
            let log = FileManager.default.temporaryDirectory.appendingPathComponent(
                "tk-pglock-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
            ).path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let children = try (0..<processes).map { _ in try PostgresChild("pglock-loop", [url, name, log, String(rounds)]) }
            for child in children { XCTAssertEqual(child.waitForExit(timeout: 300), 0, "a pglock-loop child failed") }

            let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            XCTAssertEqual(lines.count, processes * rounds * 2)
            var inside: (pid: Substring, token: Int64)?
            var lastToken: Int64 = .min
            var enters = 0
            for (number, line) in lines.enumerated() {
                let parts = line.split(separator: " ")
                guard parts.count == 3, let token = Int64(parts[2]) else { return XCTFail("line \(number): \(line)") }
                if parts[0] == "enter" {
                    XCTAssertNil(inside, "line \(number): \(parts[1]) entered while \(inside.map { String($0.pid) } ?? "") was inside")
                    XCTAssertGreaterThan(token, lastToken, "line \(number): token \(token) after \(lastToken)")
                    inside = (parts[1], token)
                    lastToken = token
                    enters += 1
                } else {
                    XCTAssertEqual(inside?.pid, parts[1], "line \(number): exit by a process that was not inside")
                    XCTAssertEqual(inside?.token, token)
                    inside = nil
                }
            }
            XCTAssertEqual(enters, processes * rounds)
        }

        /// A holder killed with SIGKILL mid critical section: the server ends its session when the
        /// connection drops, and a waiter already in pg_advisory_lock acquires within 1 s (the issue's
        /// bound; the server sees the closed socket at once, so this is milliseconds in practice).
        func testKill9OfTheHolderLetsAWaiterAcquireWithinOneSecond() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let holder = try PostgresChild("pglock-hold", [url, name])
            let locked = try XCTUnwrap(holder.waitForLine(startingWith: "locked "), "the child never took the lock")
            let holderToken = try XCTUnwrap(Int64(locked.dropFirst("locked ".count)))
            let waiter = try TKPostgresLock(name: name, url: url)
            let call = BackgroundLockCall(waiter, before: .now + .seconds(60))
            try waitUntil("the waiter waits in pg_advisory_lock") { try PgLocks.waiting(name) == 1 }
            let killedAt = Date()
            holder.kill9()
            XCTAssertTrue(call.wait(timeout: 30), "the waiter never acquired")
            XCTAssertEqual(try call.result(), true)
            let delay = try XCTUnwrap(call.returnedAt).timeIntervalSince(killedAt)
            XCTAssertLessThan(delay, 1.0, "acquired \(delay) s after kill -9")
            XCTAssertGreaterThan(try XCTUnwrap(waiter.fencingToken), holderToken)
            try waiter.unlock()
        }

        /// pg_terminate_backend of the holder's session: the holder is told (onLost) and the write it
        /// then attempts with its old token is refused by the fenced store, which the new holder wrote.
        func testTerminatedHolderIsToldAndItsTokenIsRefused() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let store = try TKPostgresFencedStore(resource: name, configuration: TKPostgresConfiguration(url: url))
            let lost = DispatchSemaphore(value: 0)
            let lossBox = ResultBox()
            let holder = try TKPostgresLock(name: name, url: url) { loss in
                lossBox.set(.success(loss.error.message.contains("ended")))
                lost.signal()
            }
            XCTAssertTrue(try holder.tryLock())
            let oldToken = try XCTUnwrap(holder.fencingToken)
            try store.write("first holder", token: oldToken)
            let pid = try PostgresTestServer.psql(
                """
                SELECT l.pid FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid
                WHERE l.locktype = 'advisory' AND l.granted AND t.name = '\(name)'
                """)
            XCTAssertEqual(try PostgresTestServer.psql("SELECT pg_terminate_backend(\(pid))"), "t")
            XCTAssertEqual(lost.wait(timeout: .now() + 10), .success, "the holder was not told it lost the lock")
            XCTAssertEqual(try lossBox.get(), true, "the loss does not say the session ended")
            XCTAssertFalse(holder.isHeld)

            let next = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try next.lock(before: .now + .seconds(10)))
            let newToken = try XCTUnwrap(next.fencingToken)
            XCTAssertGreaterThan(newToken, oldToken)
            try store.write("second holder", token: newToken)
            // The paused first holder wakes up and writes with the token it had.
            XCTAssertThrowsError(try store.write("stale write", token: oldToken)) { error in
                XCTAssertEqual((error as? TKError)?.code, .notLockOwner)
                XCTAssertTrue("\(error)".contains("\(oldToken) is older than \(newToken)"), "\(error)")
            }
            XCTAssertEqual(try store.read()?.value, "second holder")
            XCTAssertEqual(try PostgresTestServer.psql("SELECT value FROM threadkit_fenced WHERE resource = '\(name)'"), "second holder")
            XCTAssertThrowsError(try holder.unlock()) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
            try next.unlock()
        }

        /// A server restart while one object holds the lock and another waits for it: the holder is
        /// told, and the waiter reconnects and acquires before its deadline, with a larger token.
        func testServerRestartDuringAWaitTheWaiterReconnectsAndAcquires() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let lost = DispatchSemaphore(value: 0)
            let holder = try TKPostgresLock(name: name, url: url) { _ in lost.signal() }
            let waiter = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try holder.tryLock())
            let oldToken = try XCTUnwrap(holder.fencingToken)
            let call = BackgroundLockCall(waiter, before: .now + .seconds(60))
            try waitUntil("the waiter waits in pg_advisory_lock") { try PgLocks.waiting(name) == 1 }
            try PostgresTestServer.restart()
            XCTAssertEqual(lost.wait(timeout: .now() + 30), .success, "the holder was not told the restart ended its session")
            XCTAssertTrue(call.wait(timeout: 90), "the waiter never returned")
            XCTAssertEqual(try call.result(), true, "the waiter did not acquire after the restart")
            XCTAssertGreaterThan(try XCTUnwrap(waiter.fencingToken), oldToken)
            try waiter.unlock()
        }

        /// The server goes down during a wait and stays down past the deadline: the waiter fails with
        /// an error that says so, in bounded time after its deadline.
        func testServerDownPastTheDeadlineFailsWithAClearError() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let holder = try TKPostgresLock(name: name, url: url)
            let waiter = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try holder.tryLock())
            let deadline = ContinuousClock.now + .seconds(4)
            let call = BackgroundLockCall(waiter, before: deadline)
            try waitUntil("the waiter waits in pg_advisory_lock") { try PgLocks.waiting(name) == 1 }
            try PostgresTestServer.stopServer()
            defer { XCTAssertNoThrow(try PostgresTestServer.startServer()) }
            XCTAssertTrue(call.wait(timeout: 60), "the waiter never returned")
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "failed before its deadline")
            XCTAssertThrowsError(try call.result()) { error in
                let tk = error as? TKError
                XCTAssertEqual(tk?.code, .systemCall, "\(error)")
                XCTAssertTrue(tk?.message.contains("the deadline passed while the server could not be reached") == true, "\(error)")
            }
        }
    }
#endif
