// TKPostgresLock's inputs at their extremes: deadlines beyond PostgreSQL's longest lock_timeout
// (30 days, `.now + .seconds(Int64.max)`) and waits in slices; a URL's connect_timeout and a
// configuration's timeouts far out of range; livenessInterval out of range; canonically
// equivalent spellings of one name. Whatever can trap runs in a child process
// (`ThreadKitPostgresTestChild`); the judges are pg_locks and threadkit_locks read through psql.
#if Postgres
    import Foundation
    import ThreadKit
    import XCTest

    @testable import ThreadKitPostgres

    final class PostgresLockInputTests: XCTestCase {
        func uniqueName(_ function: String = #function) -> String { "\(function)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

        func testAThirtyDayDeadlineTakesAFreeLockAndWaitsForAHeldOne() throws {
            try farDeadline("30d")
        }

        func testAnInt64MaxSecondsDeadlineTakesAFreeLockAndWaitsForAHeldOne() throws {
            try farDeadline("max")
        }

        /// Child `pglock-far-deadline`: lock(before: far) takes the free lock, then waits in
        /// pg_advisory_lock while this process holds it (no trap, no immediate throw), and acquires
        /// once this process unlocks.
        private func farDeadline(_ mode: String) throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName() + "-" + mode
            let child = try PostgresChild("pglock-far-deadline", [url, name, mode])
            defer { if child.process.isRunning { child.kill9() } }
            func failure() -> String {
                child.waitForLine(startingWith: "error", timeout: 0)
                    ?? "exit status \(child.waitForExit(timeout: 5).map(String.init) ?? "none")"
            }
            guard child.waitForLine(startingWith: "free ") != nil else { return XCTFail("the free lock was not taken: \(failure())") }
            guard child.waitForLine(startingWith: "ready") != nil else { return XCTFail("the child stopped: \(failure())") }
            let holder = try TKPostgresLock(name: name, url: url)
            XCTAssertTrue(try holder.tryLock())
            let held = try XCTUnwrap(holder.fencingToken)
            try waitUntil("the child waits in pg_advisory_lock") { try PgLocks.waiting(name) == 1 }
            XCTAssertNil(child.waitForLine(startingWith: "error", timeout: 0), "the child gave up while the lock was held")
            try holder.unlock()
            let acquired = try XCTUnwrap(child.waitForLine(startingWith: "acquired "), "the child never acquired: \(failure())")
            XCTAssertGreaterThan(try XCTUnwrap(Int64(acquired.dropFirst("acquired ".count))), held)
            XCTAssertEqual(child.waitForExit(timeout: 60), 0)
            XCTAssertEqual(try PgLocks.granted(name), 0)
        }

        /// A wait longer than one slice (100 ms here, 1 hour by default) starts a new server-side
        /// wait at each slice's end and acquires when the holder unlocks; a deadline inside a later
        /// slice still returns false, never early.
        func testLockBeforeWaitsInSlicesUntilItsDeadline() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let a = try TKPostgresLock(name: name, url: url)
            let b = try TKPostgresLock(name: name, url: url)
            b.setWaitSlice(.milliseconds(100))
            XCTAssertTrue(try a.tryLock())
            let start = ContinuousClock.now
            XCTAssertFalse(try b.lock(before: start + .milliseconds(450)))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(450), "gave up before the deadline")

            let call = BackgroundLockCall(b, before: .now + .seconds(30 * 86_400))
            let waitStart = """
                SELECT l.waitstart FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid
                WHERE l.locktype = 'advisory' AND NOT l.granted AND t.name = '\(name)'
                """
            var first = ""
            try waitUntil("b waits in pg_advisory_lock") {
                first = try PostgresTestServer.psql(waitStart)
                return !first.isEmpty
            }
            try waitUntil("b starts a second slice") {
                let now = try PostgresTestServer.psql(waitStart)
                return !now.isEmpty && now != first
            }
            XCTAssertNil(try call.result(), "b returned while the lock was held")
            try a.unlock()
            XCTAssertTrue(call.wait(timeout: 30))
            XCTAssertEqual(try call.result(), true)
            try b.unlock()
            XCTAssertEqual(try PgLocks.granted(name), 0)
        }

        /// connect_timeout beyond a day in a URL is refused while parsing, naming the limit.
        func testAnOutOfRangeConnectTimeoutIsRefused() throws {
            for value in ["10000000000", "86401"] {
                XCTAssertThrowsError(try TKPostgresConfiguration(url: "postgres://u@h/db?connect_timeout=\(value)")) { error in
                    let tk = error as? TKError
                    XCTAssertEqual(tk?.code, .invalidArgument, "\(error)")
                    XCTAssertTrue(tk?.message.contains("connect_timeout=\(value) is more than 86400 seconds") == true, "\(error)")
                    XCTAssertTrue(tk?.message.contains("Fix:") == true, "\(error)")
                }
            }
            XCTAssertEqual(try TKPostgresConfiguration(url: "postgres://u@h/db?connect_timeout=86400").connectTimeout, .seconds(86_400))
        }

        /// Child `pglock-config-extremes`: the URL with connect_timeout=10000000000 is refused with a
        /// TKError (it trapped while connecting), and a configuration whose connectTimeout and
        /// statementTimeout are Int64.max seconds connects and locks (taken as 100 years).
        func testExtremeTimeoutsNeverTrap() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let child = try PostgresChild("pglock-config-extremes", [url, name])
            defer { if child.process.isRunning { child.kill9() } }
            let refused = try XCTUnwrap(child.waitForLine(startingWith: "refused "), "no refusal line")
            XCTAssertTrue(refused.contains("invalidArgument") && refused.contains("connect_timeout=10000000000"), refused)
            let locked = try XCTUnwrap(
                child.waitForLine(startingWith: "locked "),
                "no lock with extreme timeouts: \(child.waitForLine(startingWith: "error", timeout: 0) ?? "")")
            XCTAssertNotNil(Int64(locked.dropFirst("locked ".count)), locked)
            XCTAssertEqual(child.waitForExit(timeout: 60), 0)
            XCTAssertEqual(try PgLocks.granted(name), 0)
        }

        /// livenessInterval outside 50 ms…1 day is refused before connecting, naming the range; the
        /// bounds themselves are accepted.
        func testAnOutOfRangeLivenessIntervalIsRefused() throws {
            let url = try PostgresTestServer.info().url
            let name = uniqueName()
            let bad: [Duration] = [.zero, .milliseconds(-5), .nanoseconds(1), .microseconds(49_999), .seconds(86_401), .seconds(Int64.max)]
            for interval in bad {
                XCTAssertThrowsError(try TKPostgresLock(name: name, url: url, livenessInterval: interval)) { error in
                    let tk = error as? TKError
                    XCTAssertEqual(tk?.code, .invalidArgument, "\(interval): \(error)")
                    XCTAssertTrue(
                        tk?.message.contains("livenessInterval") == true && tk?.message.contains("Fix:") == true, "\(interval): \(error)")
                }
            }
            XCTAssertEqual(TKPostgresLock.minimumLivenessInterval, .milliseconds(50))
            for interval in [TKPostgresLock.minimumLivenessInterval, TKPostgresLock.maximumLivenessInterval] {
                let lock = try TKPostgresLock(name: name, url: url, livenessInterval: interval)
                XCTAssertTrue(try lock.tryLock())
                try lock.unlock()
            }
        }

        /// "café" precomposed (U+00E9) and decomposed (e + U+0301) are one lock and one fenced
        /// resource: one row in threadkit_locks, and the second spelling waits for the first.
        func testCanonicallyEquivalentNamesAreOneLock() throws {
            let url = try PostgresTestServer.info().url
            let base = uniqueName()
            let composed = "caf\u{E9}-" + base
            let decomposed = "cafe\u{301}-" + base
            XCTAssertNotEqual(Array(composed.utf8), Array(decomposed.utf8))
            let a = try TKPostgresLock(name: composed, url: url)
            let b = try TKPostgresLock(name: decomposed, url: url)
            XCTAssertEqual(Array(b.name.utf8), Array(composed.utf8), "the name is kept in NFC")
            XCTAssertTrue(try a.tryLock())
            XCTAssertFalse(try b.tryLock(), "the decomposed spelling took a lock of its own")
            XCTAssertEqual(try PgLocks.granted(composed), 1)
            XCTAssertEqual(try PostgresTestServer.psql("SELECT count(*) FROM threadkit_locks WHERE name LIKE '%\(base)'"), "1")
            try a.unlock()
            XCTAssertTrue(try b.tryLock())
            try b.unlock()

            let configuration = try TKPostgresConfiguration(url: url)
            let store = try TKPostgresFencedStore(resource: composed, configuration: configuration)
            let same = try TKPostgresFencedStore(resource: decomposed, configuration: configuration)
            try store.write("first", token: 2)
            XCTAssertEqual(try same.read()?.value, "first")
            XCTAssertThrowsError(try same.write("stale", token: 1)) { XCTAssertEqual(($0 as? TKError)?.code, .notLockOwner) }
        }
    }
#endif
