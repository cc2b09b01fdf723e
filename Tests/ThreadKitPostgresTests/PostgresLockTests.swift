// TKPostgresLock in one process against a real server: exclusion, deadlines, fencing tokens,
// lockDate and the holder, breakLock, names, TLS, and bad input. Judged through psql (pg_locks,
// pg_stat_ssl) and Foundation's clock and threads, never by the lock under test alone.
#if Postgres
    import Foundation
    import ThreadKit
    import ThreadKitPostgres
    import XCTest

    final class PostgresLockTests: XCTestCase {
        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        func testTryLockExcludesAnotherSessionAndTokensGrow() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try a.tryLock())
            XCTAssertFalse(try a.tryLock(), "held by this object: false, not a second (re-entrant) acquisition")
            let first = try XCTUnwrap(a.fencingToken)
            XCTAssertFalse(try b.tryLock())
            XCTAssertEqual(try PgLocks.granted(name), 1, "pg_locks shows one granted advisory lock for the name")
            try a.unlock()
            XCTAssertNil(a.fencingToken)
            XCTAssertEqual(try PgLocks.granted(name), 0)
            XCTAssertTrue(try b.tryLock())
            XCTAssertGreaterThan(try XCTUnwrap(b.fencingToken), first)
            try b.unlock()
        }

        func testLockBeforeDeadlineGivesUpNeverEarly() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try a.lock(before: .now + .seconds(10)))
            let start = ContinuousClock.now
            XCTAssertFalse(try b.lock(before: start + .milliseconds(300)))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(300), "gave up before the deadline")
            XCTAssertEqual(try PgLocks.granted(name), 1)
            XCTAssertThrowsError(try a.lock(before: .now + .seconds(1))) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
            try a.unlock()
            XCTAssertTrue(try b.lock(before: .now + .seconds(10)), "the session is usable after a lock_timeout")
            try b.unlock()
        }

        func testWaiterGetsTheLockWhenTheHolderUnlocks() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try a.tryLock())
            let call = BackgroundLockCall(b, before: .now + .seconds(30))
            try waitUntil("b waits in pg_advisory_lock") { try PgLocks.waiting(name) == 1 }
            try a.unlock()
            XCTAssertTrue(call.wait(timeout: 30))
            XCTAssertEqual(try call.result(), true)
            try b.unlock()
        }

        func testLockDateAndHolderDescribeTheCurrentHolder() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            XCTAssertNil(b.lockDate)
            XCTAssertNil(try b.currentHolder())
            let before = Date()
            XCTAssertTrue(try a.tryLock())
            let date = try XCTUnwrap(b.lockDate)
            XCTAssertLessThan(abs(date.timeIntervalSince(before)), 60, "the server's clock, on this machine")
            let holder = try XCTUnwrap(b.currentHolder())
            XCTAssertEqual(holder.client?.hasSuffix("pid \(getpid())"), true, "\(holder)")
            XCTAssertEqual(holder.token, a.fencingToken)
            XCTAssertEqual(
                String(holder.serverPID),
                try PostgresTestServer.psql(
                    "SELECT l.pid FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid WHERE l.locktype = 'advisory' AND l.granted AND t.name = '\(name)'"
                ))
            try a.unlock()
            XCTAssertNil(b.lockDate)
        }

        func testBreakLockEndsTheHoldersSessionAndSaysWhoseItWas() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let lost = DispatchSemaphore(value: 0)
            let a = try TKPostgresLock(name: name, url: url) { _ in lost.signal() }
            let b = try TKPostgresLock(name: name, url: url)
            XCTAssertNil(try b.breakLock(), "nobody holds it: nothing to break")
            XCTAssertTrue(try a.tryLock())
            let token = try XCTUnwrap(a.fencingToken)
            let holder = try XCTUnwrap(b.breakLock())
            XCTAssertEqual(holder.token, token)
            XCTAssertEqual(holder.client?.hasSuffix("pid \(getpid())"), true)
            XCTAssertEqual(lost.wait(timeout: .now() + 10), .success, "the holder was not told it lost the lock")
            XCTAssertFalse(a.isHeld)
            XCTAssertNotNil(a.lossError)
            XCTAssertTrue(try b.lock(before: .now + .seconds(10)))
            XCTAssertGreaterThan(try XCTUnwrap(b.fencingToken), token)
            XCTAssertThrowsError(try a.unlock()) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
            try b.unlock()
            XCTAssertTrue(try a.tryLock(), "the broken object reconnects and can take the lock again")
            try a.unlock()
        }

        func testTheLivenessCheckKeepsAHealthyHoldAndDeclaresASilentSessionLost() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let lost = DispatchSemaphore(value: 0)
            let lock = try TKPostgresLock(name: name, url: url, livenessInterval: .milliseconds(50)) { _ in lost.signal() }
            XCTAssertTrue(try lock.tryLock())
            // Many checks pass while the session is healthy.
            XCTAssertEqual(
                lost.wait(timeout: .now() + 1), .timedOut, "a healthy hold was reported lost: \(lock.lossError.map { "\($0)" } ?? "")")
            XCTAssertTrue(lock.isHeld)
            try lock.unlock()
            // A server process that stops answering (SIGSTOP: a partition as the client sees it).
            XCTAssertTrue(try lock.tryLock())
            let pid = try XCTUnwrap(
                Int32(
                    PostgresTestServer.psql(
                        """
                        SELECT l.pid FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid
                        WHERE l.locktype = 'advisory' AND l.granted AND t.name = '\(name)'
                        """)))
            XCTAssertEqual(kill(pid, SIGSTOP), 0, "the tests run as root or as the server's user, to stop its process")
            defer { kill(pid, SIGCONT) }
            XCTAssertEqual(lost.wait(timeout: .now() + 10), .success, "a session that stopped answering was not declared lost")
            XCTAssertEqual(lock.lossError?.errno, ETIMEDOUT, "\(lock.lossError.map { "\($0)" } ?? "")")
            kill(pid, SIGCONT)
            XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
            XCTAssertTrue(try lock.lock(before: .now + .seconds(10)), "a new session takes the lock once the old one is gone")
            try lock.unlock()
        }

        func testUnlockWithoutHoldingThrows() throws {
            let lock = try TKPostgresLock(name: uniqueName(), url: try PostgresTestServer.info().url)
            XCTAssertThrowsError(try lock.unlock()) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
        }

        func testDifferentNamesNeverShareAKey() throws {
            let url = try PostgresTestServer.info().url
            let names = (0..<20).map { "collide-\(getpid())-\($0)-\(String(repeating: "x", count: $0 * 40))" }
            let locks = try names.map { try TKPostgresLock(name: $0, url: url) }
            for lock in locks { XCTAssertTrue(try lock.tryLock(), lock.name) }
            XCTAssertEqual(
                try PostgresTestServer.psql(
                    """
                    SELECT count(DISTINCT l.objid) FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid
                    WHERE l.locktype = 'advisory' AND l.granted AND t.name LIKE 'collide-\(getpid())-%'
                    """), "20")
            for lock in locks { try lock.unlock() }
        }

        func testTLSWhenTheURLAsksForIt() throws {
            let info = try PostgresTestServer.info()
            guard info.tls else { throw XCTSkip("the test server has no TLS certificate (openssl missing when it was started)") }
            let name = uniqueName()
            let lock = try TKPostgresLock(name: name, url: info.url + "?sslmode=require")
            XCTAssertTrue(try lock.tryLock())
            XCTAssertEqual(
                try PostgresTestServer.psql(
                    """
                    SELECT s.ssl FROM pg_stat_ssl s JOIN pg_locks l ON s.pid = l.pid JOIN threadkit_locks t ON l.objid = t.id::oid
                    WHERE l.locktype = 'advisory' AND l.granted AND t.name = '\(name)'
                    """), "t")
            try lock.unlock()
        }

        func testBadInputThrowsATKErrorNamingTheFix() throws {
            let info = try PostgresTestServer.info()
            func expect(_ code: TKError.Code, _ words: String, within seconds: Double = 30, _ body: () throws -> Void) {
                let start = Date()
                XCTAssertThrowsError(try body()) { error in
                    let tk = error as? TKError
                    XCTAssertEqual(tk?.code, code, "\(error)")
                    XCTAssertTrue(tk?.message.contains(words) == true, "\(error)")
                    XCTAssertTrue(tk?.message.contains("Fix:") == true, "\(error)")
                }
                XCTAssertLessThan(Date().timeIntervalSince(start), seconds, "not within a bounded time")
            }
            // Nothing listens on port 1.
            expect(.systemCall, "cannot connect") {
                _ = try TKPostgresLock(name: "x", url: "postgres://threadkit:threadkit@127.0.0.1:1/threadkit")
            }
            expect(.invalidArgument, "refused the credentials") {
                _ = try TKPostgresLock(name: "x", url: "postgres://threadkit:wrong@127.0.0.1:\(info.port)/threadkit")
            }
            expect(.invalidArgument, "the limit is 1024") {
                _ = try TKPostgresLock(name: String(repeating: "n", count: 1025), url: info.url)
            }
            expect(.invalidArgument, "empty") { _ = try TKPostgresLock(name: "", url: info.url) }
            expect(.invalidArgument, "scheme") { _ = try TKPostgresLock(name: "x", url: "mysql://h/db") }
            expect(.invalidArgument, "port") { _ = try TKPostgresConfiguration(url: "postgres://u@h:99999/db") }
            expect(.invalidArgument, "sslmode") { _ = try TKPostgresConfiguration(url: "postgres://u@h/db?sslmode=sometimes") }
            XCTAssertNoThrow(try TKPostgresLock(name: String(repeating: "n", count: 1024), url: info.url), "1024 bytes is allowed")
        }

        func testURLParsing() throws {
            let c = try TKPostgresConfiguration(
                url: "postgresql://us%40er:p%3Ass@db.example:6543/orders?sslmode=verify-full&connect_timeout=2")
            XCTAssertEqual(c.user, "us@er")
            XCTAssertEqual(c.password, "p:ss")
            XCTAssertEqual(c.host, "db.example")
            XCTAssertEqual(c.port, 6543)
            XCTAssertEqual(c.database, "orders")
            XCTAssertEqual(c.tls, .verifyFull)
            XCTAssertEqual(c.connectTimeout, .seconds(2))
            let socket = try TKPostgresConfiguration(url: "postgres://me@/db?host=/run/postgresql")
            XCTAssertEqual(socket.socketDirectory, "/run/postgresql")
            XCTAssertEqual(socket.port, 5432)
            let ipv6 = try TKPostgresConfiguration(url: "postgres://[::1]:7000")
            XCTAssertEqual(ipv6.host, "::1")
            XCTAssertEqual(ipv6.port, 7000)
            XCTAssertEqual(ipv6.user, "postgres")
            XCTAssertEqual(ipv6.tls, .prefer)
        }
    }

    /// Polls `condition` until it holds, failing after `timeout` (an event seen from outside, such as
    /// a row in pg_locks, has nothing to wait on).
    func waitUntil(_ what: String, timeout: TimeInterval = 30, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try !condition() {
            if Date() > deadline { throw PostgresServerUnavailable(message: "timed out waiting until \(what)") }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// A result handed from a thread to the test, under a Foundation lock.
    final class ResultBox: @unchecked Sendable {
        private let lock = NSLock()
        private var result: Result<Bool, any Error>? // guarded by `lock`

        func set(_ value: Result<Bool, any Error>) { lock.withLock { result = value } }
        func get() throws -> Bool? { try lock.withLock { result }?.get() }
    }
#endif
