// LockSchema: the two tables ThreadKitPostgres keeps in the database, created on first use, and
// the mapping from a lock's name to its advisory-lock key. Stateless; every function runs on the
// session it is given, from the thread that owns that session's current call.
//
//   threadkit_locks(id integer identity UNIQUE, name text PRIMARY KEY, token bigint,
//                   holder_pid integer, holder text, acquired_at timestamptz)
//     one row per lock name (in Unicode NFC, `normalized`), created the first time the name is
//     used. `id` is the lock's
//     advisory key: pg_advisory_lock(namespace, id), the two-int4 form, whose first half is
//     ThreadKit's namespace so that no other application's advisory keys (one bigint, or two
//     int4s of its own) collide with ours, and whose second half is distinct per name because it
//     comes from an identity column, not a hash. `token` is the fencing token, incremented by the
//     holder right after pg_advisory_lock succeeds, in the same session; holder_pid, holder and
//     acquired_at are written by that same statement and describe the latest acquisition (release
//     writes nothing: TKPostgresLock.swift's header says why; pg_locks says whether it is held).
//   threadkit_fenced(resource text PRIMARY KEY, token bigint, value text, written_at timestamptz)
//     TKPostgresFencedStore's resources: the highest token that wrote each one.
//
// Creating the tables races when several processes start at once (CREATE TABLE IF NOT EXISTS is
// not safe against a concurrent create), so creation runs in a transaction that first takes a
// transaction-level advisory lock (namespace, 0).
#if Postgres
    import PostgresNIO
    import ThreadKit

    enum LockSchema {
        /// The first int4 of every ThreadKit advisory key: "TKPG".
        static let namespace: Int32 = 0x544B_5047
        /// The longest lock name, in UTF-8 bytes (a btree entry must stay well under a page).
        static let maximumNameBytes = 1024

        /// Creates the tables unless they exist.
        static func ensureTables(_ session: PostgresSession) throws {
            let exists = try session.query(
                "SELECT to_regclass('threadkit_locks') IS NOT NULL AND to_regclass('threadkit_fenced') IS NOT NULL",
                what: "looking for ThreadKit's tables")
            if try exists.first?.decode(Bool.self) == true { return }
            do {
                _ = try session.query("BEGIN", what: "creating ThreadKit's tables")
                _ = try session.query("SELECT pg_advisory_xact_lock(\(namespace), 0)", what: "creating ThreadKit's tables")
                _ = try session.query(
                    """
                    CREATE TABLE IF NOT EXISTS threadkit_locks (
                        id integer GENERATED ALWAYS AS IDENTITY UNIQUE,
                        name text PRIMARY KEY,
                        token bigint NOT NULL DEFAULT 0,
                        holder_pid integer,
                        holder text,
                        acquired_at timestamptz)
                    """, what: "creating table threadkit_locks")
                _ = try session.query(
                    """
                    CREATE TABLE IF NOT EXISTS threadkit_fenced (
                        resource text PRIMARY KEY,
                        token bigint NOT NULL,
                        value text,
                        written_at timestamptz NOT NULL DEFAULT clock_timestamp())
                    """, what: "creating table threadkit_fenced")
                _ = try session.query("COMMIT", what: "creating ThreadKit's tables")
            } catch let error as TKError {
                _ = try? session.query("ROLLBACK", what: "abandoning the creation of ThreadKit's tables")
                if error.code == .protocolViolation {
                    throw TKError(
                        .invalidArgument,
                        error.message + " Fix: let the URL's user create tables in the database, "
                            + "or create threadkit_locks and threadkit_fenced once as docs/DistributedLockPostgres.md shows.")
                }
                throw error
            }
        }

        /// The advisory key (second int4) of `name`, adding its row on first use.
        static func key(of name: String, _ session: PostgresSession) throws -> Int32 {
            _ = try session.query(
                "INSERT INTO threadkit_locks (name) VALUES (\(name)) ON CONFLICT (name) DO NOTHING",
                what: "registering the lock's name")
            let rows = try session.query("SELECT id FROM threadkit_locks WHERE name = \(name)", what: "looking up the lock's key")
            guard let id = try rows.first?.decode(Int32.self) else {
                throw TKError(
                    .protocolViolation,
                    "\(session.owner): the lock's row vanished from threadkit_locks. Fix: do not delete rows of threadkit_locks.")
            }
            return id
        }

        /// Writes `value` to the fenced resource `resource` (normalised) with `token` if no higher
        /// token wrote it: the check and the write are one statement, atomic under the row lock.
        /// Equal tokens are accepted. Returns false when the write was refused.
        static func fencedWrite(_ value: String, resource: String, token: Int64, _ session: PostgresSession, what: String) throws -> Bool {
            let rows = try session.query(
                """
                INSERT INTO threadkit_fenced AS f (resource, token, value) VALUES (\(resource), \(token), \(value))
                ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value, written_at = clock_timestamp()
                WHERE f.token <= EXCLUDED.token
                RETURNING token
                """, what: what)
            return !rows.isEmpty
        }

        /// `name` in Unicode NFC. Names (and fenced resources) are compared by the server as bytes
        /// (the `text` primary key), while Swift's `==` says canonically equivalent spellings (é as one
        /// code point, or e + U+0301) are the same string: normalising before a name reaches the server
        /// makes them one lock, as a Swift programmer expects. The standard library's own NFC (what
        /// String comparison uses) does it: FoundationEssentials has no
        /// precomposedStringWithCanonicalMapping, and full Foundation is not a dependency here.
        static func normalized(_ name: String) -> String {
            String(decoding: name._nfcCodeUnits, as: UTF8.self)
        }

        /// Checks a lock name (already normalised): non-empty, no NUL, at most `maximumNameBytes` UTF-8
        /// bytes.
        static func validate(_ name: String) throws {
            let bytes = name.utf8.count
            if bytes == 0 {
                throw TKError(.invalidArgument, "TKPostgresLock(name: \"\"): the name is empty. Fix: name the resource the lock protects.")
            }
            if bytes > maximumNameBytes {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresLock(name: \"\(name.prefix(32))…\"): the name is \(bytes) UTF-8 bytes long; "
                        + "the limit is \(maximumNameBytes). Fix: use a shorter name (a hash of a long one, if it must be derived).")
            }
            if name.utf8.contains(0) {
                throw TKError(
                    .invalidArgument,
                    "TKPostgresLock(name:): the name contains a NUL character, which PostgreSQL text cannot hold. "
                        + "Fix: remove it.")
            }
        }

        /// The pg_locks condition selecting the granted advisory lock of key `id` in this database.
        static func grantedCondition(key: String) -> String {
            "l.locktype = 'advisory' AND l.classid = \(UInt32(bitPattern: namespace))::oid AND l.objid = (\(key))::oid "
                + "AND l.objsubid = 2 AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        }
    }
#endif
