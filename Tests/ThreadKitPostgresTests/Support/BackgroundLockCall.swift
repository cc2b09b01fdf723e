// BackgroundLockCall: `lock.lock(before:)` on a Foundation thread, so that a test can act (kill
// the holder, restart the server) while it waits; and the pg_locks judges, read through psql.
#if Postgres
    import Foundation
    import ThreadKitPostgres

    final class BackgroundLockCall: @unchecked Sendable {
        private let done = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var outcome: Result<Bool, any Error>? // guarded by `lock`
        private var endedAt: Date? // guarded by `lock`

        init(_ target: TKPostgresLock, before deadline: ContinuousClock.Instant) {
            Thread.detachNewThread { [self] in
                let result = Result { try target.lock(before: deadline) }
                lock.withLock {
                    outcome = result
                    endedAt = Date()
                }
                done.signal()
            }
        }

        /// Waits (at most `timeout` seconds) for the call to return; false if it did not.
        func wait(timeout: TimeInterval) -> Bool { done.wait(timeout: .now() + timeout) == .success }
        /// What `lock(before:)` returned or threw; nil while it runs.
        func result() throws -> Bool? { try lock.withLock { outcome }?.get() }
        /// When it returned.
        var returnedAt: Date? { lock.withLock { endedAt } }
    }

    enum PgLocks {
        /// Granted advisory locks on the lock named `name`, from pg_locks.
        static func granted(_ name: String) throws -> Int { try count(name, granted: true) }
        /// Sessions waiting for the advisory lock on `name`, from pg_locks.
        static func waiting(_ name: String) throws -> Int { try count(name, granted: false) }

        private static func count(_ name: String, granted: Bool) throws -> Int {
            Int(
                try PostgresTestServer.psql(
                    """
                    SELECT count(*) FROM pg_locks l JOIN threadkit_locks t ON l.objid = t.id::oid
                    WHERE l.locktype = 'advisory' AND \(granted ? "" : "NOT ") l.granted AND t.name = '\(name)'
                    """)) ?? -1
        }
    }
#endif
