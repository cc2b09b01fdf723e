// TKPostgresLock when an acquisition fails after the server granted the advisory lock (the token
// update refused, the holder's record unreadable, the commit's answer lost), injected through
// TKPostgresLock's internal fault hook and provoked on a real server (the token row held locked by
// another connection; group commit delaying the previous holder's commit). Judged through psql
// (pg_locks) and a second lock object, never by the failing object alone.
#if Postgres
    import Foundation
    import ThreadKit
    import XCTest

    @testable import ThreadKitPostgres

    final class PostgresLockAcquisitionTests: XCTestCase {
        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        /// Group commit (commit_delay 20 ms, fsync on) keeps the releasing session's row lock for the
        /// length of its commit; contenders with short deadlines and tryLocks must never see that as a
        /// failure, and never leave an advisory lock behind.
        func testGroupCommitNeverFailsAnAcquisitionNorLeavesALockBehind() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            try PostgresTestServer.psqlAdmin("ALTER SYSTEM SET fsync = on")
            defer { _ = try? PostgresTestServer.psqlAdmin("ALTER SYSTEM RESET commit_delay") }
            defer { _ = try? PostgresTestServer.psqlAdmin("ALTER SYSTEM RESET commit_siblings") }
            defer { _ = try? PostgresTestServer.psqlAdmin("ALTER SYSTEM RESET fsync") }
            defer { _ = try? PostgresTestServer.psqlAdmin("SELECT pg_reload_conf()") }
            try PostgresTestServer.psqlAdmin("ALTER SYSTEM SET commit_delay = 20000")
            try PostgresTestServer.psqlAdmin("ALTER SYSTEM SET commit_siblings = 0")
            try PostgresTestServer.psqlAdmin("SELECT pg_reload_conf()")
            let threads = 4
            let rounds = 100
            let locks = try (0..<threads).map { _ in try TKPostgresLock(name: name, url: url) }
            let tally = Tally()
            let done = DispatchSemaphore(value: 0)
            for lock in locks {
                Thread.detachNewThread {
                    for round in 0..<rounds {
                        do {
                            let got =
                                round % 2 == 0 ? try lock.tryLock() : try lock.lock(before: .now + .milliseconds(Int64(1 + round % 15)))
                            if got {
                                try lock.unlock()
                                tally.add(acquired: 1)
                            }
                        } catch {
                            tally.add(failure: "\(error)")
                        }
                    }
                    done.signal()
                }
            }
            for _ in 0..<threads { XCTAssertEqual(done.wait(timeout: .now() + 240), .success, "a contender never finished") }
            let (acquired, failures) = tally.read()
            XCTAssertEqual(failures, [], "\(failures.count) acquisitions failed")
            XCTAssertGreaterThan(acquired, 0)
            for lock in locks { XCTAssertFalse(lock.isHeld) }
            XCTAssertEqual(try PgLocks.granted(name), 0, "an advisory lock was left behind")
            let other = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try other.tryLock(), "the lock is free")
            try other.unlock()
        }

        /// Every step after the grant failing as a refused statement (what the server says for a
        /// lock_timeout on the token row, 55P03), in tryLock and lock(before:): the call throws, says
        /// the lock was released, and it was — at once, on the same session.
        func testARefusalAfterTheGrantReleasesTheLock() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            for step in Self.afterTheGrant {
                for call in ["tryLock", "lock(before:)"] {
                    a.injectAcquisitionFault(Self.fail(at: step, with: Self.refusal(step)))
                    XCTAssertThrowsError(try (call == "tryLock" ? a.tryLock() : a.lock(before: .now + .seconds(10)))) { error in
                        XCTAssertEqual((error as? TKError)?.code, .protocolViolation, "\(call) at \(step): \(error)")
                        XCTAssertTrue("\(error)".contains("the lock was released, so nobody holds it"), "\(call) at \(step): \(error)")
                    }
                    XCTAssertEqual(try PgLocks.granted(name), 0, "\(call) at \(step): the advisory lock stayed granted")
                    try assertNobodyHolds(a, name, other: b, "\(call) at \(step)")
                }
            }
        }

        /// Every step after the grant failing as a lost connection (the commit's answer never came):
        /// tryLock throws and the session is closed, so the server releases the lock; lock(before:)
        /// reconnects and waits again — a persistent failure ends at its deadline with nothing held, a
        /// single one ends with exactly one acquisition.
        func testALostConnectionAfterTheGrantReleasesTheLock() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            for step in Self.afterTheGrant {
                a.injectAcquisitionFault(Self.fail(at: step, with: Self.cut(step)))
                XCTAssertThrowsError(try a.tryLock()) { error in
                    XCTAssertEqual((error as? TKError)?.code, .systemCall, "tryLock at \(step): \(error)")
                    XCTAssertTrue("\(error)".contains("given back by closing the session"), "tryLock at \(step): \(error)")
                }
                try waitUntil("the server released the closed session's lock (tryLock at \(step))") { try PgLocks.granted(name) == 0 }
                try assertNobodyHolds(a, name, other: b, "tryLock at \(step)")

                a.injectAcquisitionFault(Self.fail(at: step, with: Self.cut(step)))
                let deadline = ContinuousClock.now + .milliseconds(500)
                XCTAssertThrowsError(try a.lock(before: deadline)) { error in
                    XCTAssertEqual((error as? TKError)?.code, .systemCall, "lock(before:) at \(step): \(error)")
                    XCTAssertTrue("\(error)".contains("the deadline passed"), "lock(before:) at \(step): \(error)")
                }
                XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "lock(before:) at \(step) failed before its deadline")
                try waitUntil("the server released the closed sessions' locks (lock(before:) at \(step))") {
                    try PgLocks.granted(name) == 0
                }
                try assertNobodyHolds(a, name, other: b, "lock(before:) at \(step)")

                a.injectAcquisitionFault(Self.fail(at: step, with: Self.cut(step), times: 1))
                XCTAssertTrue(try a.lock(before: .now + .seconds(30)), "lock(before:) at \(step), failing once")
                XCTAssertEqual(try PgLocks.granted(name), 1, "lock(before:) at \(step), failing once: one acquisition")
                XCTAssertFalse(try b.tryLock())
                try a.unlock()
                XCTAssertEqual(try PgLocks.granted(name), 0, "lock(before:) at \(step), failing once: left a lock behind")
            }
        }

        /// The real refusal: another connection keeps the lock's row in threadkit_locks locked, so the
        /// token update waits for it under lock_timeout and the server cancels it (55P03) after
        /// granting the advisory lock. Both calls throw, release, and leave the lock usable.
        func testALockTimeoutOnTheTokenRowReleasesTheLock() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            let locker = try RowLocker(url: url, name: name)
            defer { locker.end() }
            XCTAssertThrowsError(try a.lock(before: .now + .milliseconds(300))) { error in
                XCTAssertTrue("\(error)".contains("55P03"), "\(error)")
                XCTAssertTrue("\(error)".contains("the lock was released, so nobody holds it"), "\(error)")
                XCTAssertTrue("\(error)".contains("Fix: another session keeps threadkit_locks' row"), "\(error)")
            }
            XCTAssertFalse(a.isHeld)
            XCTAssertEqual(try PgLocks.granted(name), 0)
            // tryLock sets no lock_timeout of its own: the row wait ends at lock(before:)'s last
            // setting (55P03, released at once) or at the statement limit (session closed).
            XCTAssertThrowsError(try a.tryLock()) { error in
                XCTAssertTrue("\(error)".contains("so nobody holds it"), "\(error)")
            }
            try waitUntil("the lock is released") { try PgLocks.granted(name) == 0 }
            XCTAssertFalse(a.isHeld)
            locker.end()
            try assertNobodyHolds(a, name, other: b, "after the row lock")
        }

        /// The grant statement failing although the server granted the lock (what PostgreSQL does
        /// when lock_timeout fires as the lock is granted): the session holds the lock, so the
        /// acquisition completes — true, a token, one granted lock — instead of returning false or
        /// throwing over a lock that nobody could then release. A lost connection there closes the
        /// session.
        func testAGrantStatementThatFailsAfterGrantingStillAcquires() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            for call in ["tryLock", "lock(before:)"] {
                a.injectAcquisitionFault(Self.fail(at: .grant, with: Self.refusal(.grant)))
                XCTAssertTrue(try call == "tryLock" ? a.tryLock() : a.lock(before: .now + .seconds(10)), call)
                XCTAssertNotNil(a.fencingToken, call)
                XCTAssertEqual(try PgLocks.granted(name), 1, call)
                XCTAssertFalse(try b.tryLock(), call)
                try a.unlock()
                XCTAssertEqual(try PgLocks.granted(name), 0, "\(call): left a lock behind")
            }
            a.injectAcquisitionFault(Self.fail(at: .grant, with: Self.cut(.grant)))
            XCTAssertThrowsError(try a.tryLock()) { XCTAssertEqual(($0 as? TKError)?.code, .systemCall, "\($0)") }
            try waitUntil("the server released the closed session's lock") { try PgLocks.granted(name) == 0 }
            try assertNobodyHolds(a, name, other: b, "tryLock, connection lost at the grant")
            a.injectAcquisitionFault(Self.fail(at: .grant, with: Self.cut(.grant), times: 1))
            XCTAssertTrue(try a.lock(before: .now + .seconds(30)))
            XCTAssertEqual(try PgLocks.granted(name), 1)
            try a.unlock()
            XCTAssertEqual(try PgLocks.granted(name), 0)
        }

        /// The steps after the grant statement answered that it granted the lock.
        static let afterTheGrant: [TKPostgresLock.AcquisitionStep] = [.tokenUpdate, .commit, .holderRecord]

        /// After a failed acquisition: `a` says it does not hold the lock, another object takes it,
        /// and `a` can take and release it again leaving nothing behind (judged in pg_locks).
        private func assertNobodyHolds(
            _ a: TKPostgresLock, _ name: String, other b: TKPostgresLock, _ what: String,
            file: StaticString = #filePath, line: UInt = #line
        ) throws {
            a.injectAcquisitionFault(nil)
            XCTAssertFalse(a.isHeld, what, file: file, line: line)
            XCTAssertNil(a.fencingToken, what, file: file, line: line)
            XCTAssertThrowsError(try a.unlock(), what, file: file, line: line) {
                XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner, what, file: file, line: line)
            }
            XCTAssertTrue(try b.tryLock(), "\(what): another object cannot take the lock", file: file, line: line)
            try b.unlock()
            XCTAssertTrue(try a.lock(before: .now + .seconds(10)), what, file: file, line: line)
            XCTAssertEqual(try PgLocks.granted(name), 1, what, file: file, line: line)
            try a.unlock()
            XCTAssertEqual(try PgLocks.granted(name), 0, "\(what): a later lock/unlock left a lock behind", file: file, line: line)
        }

        static func refusal(_ step: TKPostgresLock.AcquisitionStep) -> TKError {
            TKError(
                .protocolViolation,
                "injected at \(step): the server refused recording the fencing token (55P03: canceling statement due to lock timeout).")
        }

        static func cut(_ step: TKPostgresLock.AcquisitionStep) -> TKError {
            TKError(.systemCall, "injected at \(step): the connection was lost while recording the fencing token.", errno: ECONNRESET)
        }

        /// A fault hook failing `step` with `error`, `times` times.
        static func fail(
            at step: TKPostgresLock.AcquisitionStep, with error: TKError,
            times: Int = .max
        ) -> @Sendable (TKPostgresLock.AcquisitionStep) throws -> Void {
            let left = Tally()
            return { current in
                guard current == step, left.read().acquired < times else { return }
                left.add(acquired: 1)
                throw error
            }
        }
    }

    /// A psql session that keeps the row of lock `name` in threadkit_locks locked (SELECT … FOR
    /// UPDATE in an open transaction) until `end()`.
    final class RowLocker: @unchecked Sendable {
        private let process = Process()
        private let input = Pipe(), output = Pipe()
        private let lock = NSLock()
        private var ended = false // guarded by `lock`

        init(url: String, name: String) throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["psql", url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            input.fileHandleForWriting.write(
                Data(
                    """
                    BEGIN;
                    SELECT id FROM threadkit_locks WHERE name = '\(name)' FOR UPDATE;
                    \\echo locked

                    """.utf8))
            var seen = ""
            while !seen.contains("locked\n") {
                let data = output.fileHandleForReading.availableData
                if data.isEmpty { throw PostgresServerUnavailable(message: "psql ended before locking the row: \(seen)") }
                seen += String(decoding: data, as: UTF8.self)
            }
        }

        /// Ends the transaction (the row lock with it) and psql; idempotent.
        func end() {
            guard
                lock.withLock({
                    defer { ended = true }
                    return !ended
                })
            else { return }
            input.fileHandleForWriting.write(Data("ROLLBACK;\n".utf8))
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
    }

    /// Counts from several threads, under a Foundation lock.
    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var acquired = 0 // guarded by `lock`
        private var failures: [String] = [] // guarded by `lock`

        func add(acquired count: Int) { lock.withLock { acquired += count } }
        func add(failure: String) { lock.withLock { failures.append(failure) } }
        func read() -> (acquired: Int, failures: [String]) { lock.withLock { (acquired, failures) } }
    }
#endif
