// OperationQueueSchema: the tables and functions of TKPostgresOperationQueue, created on first use
// and versioned (threadkit_schema, component 'operation_queue'); each migration is idempotent and
// runs under a transaction-level advisory lock (LockSchema.namespace, 1), so processes that start
// at once migrate once. A database whose version is newer than this library knows is refused.
// Stateless; every function runs on the session it is given.
//
//   threadkit_queues(id identity, name text PK, max_concurrent)   one row per queue name (NFC, the
//       lock's name rules); max_concurrent < 0 means no cluster-wide limit.
//   threadkit_ops(id bigint PK from threadkit_op_ids, queue_id, kind, payload (JSON text), state,
//       priority, qos, barrier, deps_left, not_before, attempt, max_attempts, backoff_ms, token,
//       lease_until, worker, cancel_requested, last_error, created_at, started_at, finished_at)
//     state: pending → running → finished | cancelled | dead, or running → pending (a retry, an
//     expired lease, a hand-back). Terminal states release dependents (deps_left - 1).
//   threadkit_op_edges(depends_on, op)   op starts only after depends_on reached a terminal state.
//     An operation's dependencies are in its own batch (earlier in its topological order) or
//     existed before the batch was added, and existing operations never gain dependencies, so no
//     cycle can be stored.
//   sequence threadkit_op_tokens   fencing tokens: each claim takes the next value, so the tokens
//     of one operation's runs strictly increase.
//
// The state changes are plpgsql functions (one round trip each; a worker's loop settles and claims
// with threadkit_op_cycle, both in one, and each statement in them sees
// what committed before it started: a dependents' release never misses an edge committed by an
// insert that held the dependency row FOR SHARE). Notifications on channel `threadkit_ops`:
// "n QUEUE" new or released work, "f QUEUE" operations reached a terminal state, "c QUEUE"
// cancellation requested.
#if Postgres
    import PostgresNIO
    import ThreadKit

    enum OperationQueueSchema {
        /// The schema version this library writes and understands.
        static let version: Int32 = 1
        /// The NOTIFY channel of every queue.
        static let channel = "threadkit_ops"
        /// The first int4 of the queues' advisory keys ("TKPQ"): (barrierNamespace, queue id).
        static let barrierNamespace: Int32 = 0x544B_5051

        /// Creates or migrates the tables unless they are at `version`.
        static func ensure(_ session: PostgresSession) throws {
            if try currentVersion(session) == version { return }
            do {
                _ = try session.query("BEGIN", what: "migrating the operation queue's tables")
                _ = try session.query(
                    "SELECT pg_advisory_xact_lock(\(LockSchema.namespace), 1)", what: "migrating the operation queue's tables")
                _ = try session.query(
                    "CREATE TABLE IF NOT EXISTS threadkit_schema (component text PRIMARY KEY, version integer NOT NULL)",
                    what: "creating table threadkit_schema")
                let found = try currentVersion(session) ?? 0
                if found > version {
                    throw TKError(
                        .invalidArgument,
                        "TKPostgresOperationQueue: the database's operation-queue schema is version \(found), newer than "
                            + "this library's \(version). Fix: upgrade ThreadKit in this process.")
                }
                if found < 1 {
                    for statement in migration1 {
                        _ = try session.query(PostgresQuery(unsafeSQL: statement), what: "migrating to version 1")
                    }
                }
                _ = try session.query(
                    """
                    INSERT INTO threadkit_schema (component, version) VALUES ('operation_queue', \(version))
                    ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version
                    """, what: "recording the schema version")
                _ = try session.query("COMMIT", what: "migrating the operation queue's tables")
            } catch let error as TKError {
                _ = try? session.query("ROLLBACK", what: "abandoning the migration")
                if error.code == .protocolViolation {
                    throw TKError(
                        .invalidArgument,
                        error.message + " Fix: let the URL's user create tables and functions in the database "
                            + "(docs/OperationQueuePostgres.md lists them).")
                }
                throw error
            }
        }

        private static func currentVersion(_ session: PostgresSession) throws -> Int32? {
            let exists = try session.query(
                "SELECT to_regclass('threadkit_schema') IS NOT NULL", what: "looking for the operation queue's schema version")
            guard try exists.first?.decode(Bool.self) == true else { return nil }
            let rows = try session.query(
                "SELECT max(version) FROM threadkit_schema WHERE component = 'operation_queue'",
                what: "reading the operation queue's schema version")
            return try rows.first?.decode(Int32?.self)
        }

        /// The queue's id, adding its row on first use.
        static func queueID(of name: String, _ session: PostgresSession) throws -> Int32 {
            _ = try session.query(
                "INSERT INTO threadkit_queues (name) VALUES (\(name)) ON CONFLICT (name) DO NOTHING", what: "registering the queue's name")
            let rows = try session.query("SELECT id FROM threadkit_queues WHERE name = \(name)", what: "looking up the queue")
            guard let id = try rows.first?.decode(Int32.self) else {
                throw TKError(
                    .protocolViolation, "\(session.owner): the queue's row vanished. Fix: do not delete rows of threadkit_queues.")
            }
            return id
        }

        static let migration1: [String] = [
            """
            CREATE TABLE IF NOT EXISTS threadkit_queues (
                id integer GENERATED ALWAYS AS IDENTITY UNIQUE,
                name text PRIMARY KEY,
                max_concurrent integer NOT NULL DEFAULT -1)
            """,
            "CREATE SEQUENCE IF NOT EXISTS threadkit_op_ids",
            "CREATE SEQUENCE IF NOT EXISTS threadkit_op_tokens",
            """
            CREATE TABLE IF NOT EXISTS threadkit_ops (
                id bigint PRIMARY KEY DEFAULT nextval('threadkit_op_ids'),
                queue_id integer NOT NULL,
                kind text NOT NULL,
                payload text NOT NULL,
                state text NOT NULL DEFAULT 'pending',
                priority smallint NOT NULL DEFAULT 0,
                qos smallint NOT NULL DEFAULT 0,
                barrier boolean NOT NULL DEFAULT false,
                deps_left integer NOT NULL DEFAULT 0,
                not_before timestamptz NOT NULL DEFAULT now(),
                attempt integer NOT NULL DEFAULT 0,
                max_attempts integer NOT NULL DEFAULT 3,
                backoff_ms integer NOT NULL DEFAULT 1000,
                token bigint NOT NULL DEFAULT 0,
                lease_until timestamptz,
                worker text,
                cancel_requested boolean NOT NULL DEFAULT false,
                last_error text,
                created_at timestamptz NOT NULL DEFAULT now(),
                started_at timestamptz,
                finished_at timestamptz)
            """,
            "CREATE TABLE IF NOT EXISTS threadkit_op_edges (depends_on bigint NOT NULL, op bigint NOT NULL, PRIMARY KEY (depends_on, op))",
            "CREATE INDEX IF NOT EXISTS threadkit_op_edges_op ON threadkit_op_edges (op)",
            """
            CREATE INDEX IF NOT EXISTS threadkit_ops_ready ON threadkit_ops (queue_id, priority DESC, qos DESC, id)
            WHERE state = 'pending' AND deps_left = 0
            """,
            "CREATE INDEX IF NOT EXISTS threadkit_ops_open ON threadkit_ops (queue_id, id) WHERE state IN ('pending', 'running')",
            "CREATE INDEX IF NOT EXISTS threadkit_ops_leases ON threadkit_ops (lease_until) WHERE state = 'running'",
            """
            CREATE INDEX IF NOT EXISTS threadkit_ops_barriers ON threadkit_ops (queue_id, id)
            WHERE barrier AND state IN ('pending', 'running')
            """,
            // Dependents of operations that reached a terminal state: one fewer open dependency. Rows
            // are locked in id order (as insert locks dependencies), which keeps the two from deadlocking.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_release(p_done bigint[]) RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
                IF cardinality(p_done) = 0 THEN RETURN; END IF;
                PERFORM 1 FROM threadkit_ops d
                    WHERE d.id IN (SELECT e.op FROM threadkit_op_edges e WHERE e.depends_on = ANY(p_done)) ORDER BY d.id FOR UPDATE;
                UPDATE threadkit_ops d SET deps_left = d.deps_left - c.n
                    FROM (SELECT e.op, count(*) AS n FROM threadkit_op_edges e WHERE e.depends_on = ANY(p_done) GROUP BY e.op) c
                    WHERE d.id = c.op;
            END $$
            """,
            // Adds a batch whose ids the caller allocated (in topological order of its dependencies).
            """
            CREATE OR REPLACE FUNCTION threadkit_op_add(
                p_queue integer, p_ids bigint[], p_kinds text[], p_payloads text[], p_priorities integer[],
                p_qos integer[], p_not_before_ms bigint[], p_delay_ms bigint[], p_max_attempts integer[],
                p_backoff_ms integer[], p_barrier boolean[], p_edge_op bigint[], p_edge_dep bigint[]) RETURNS void
            LANGUAGE plpgsql AS $$
            DECLARE v_missing bigint; v_batch_barriers bigint[]; v_open_barriers bigint[]; v_open_ops bigint[] := '{}';
            BEGIN
                SELECT coalesce(array_agg(b.id), '{}') INTO v_batch_barriers FROM unnest(p_ids, p_barrier) AS b(id, is_barrier)
                    WHERE b.is_barrier;
                IF cardinality(v_batch_barriers) > 0 THEN
                    PERFORM pg_advisory_xact_lock(1414221905, p_queue);
                ELSE
                    PERFORM pg_advisory_xact_lock_shared(1414221905, p_queue);
                END IF;
                SELECT coalesce(array_agg(o.id), '{}') INTO v_open_barriers FROM threadkit_ops o
                    WHERE o.queue_id = p_queue AND o.barrier AND o.state IN ('pending', 'running');
                IF cardinality(v_batch_barriers) > 0 THEN
                    SELECT coalesce(array_agg(o.id), '{}') INTO v_open_ops FROM threadkit_ops o
                        WHERE o.queue_id = p_queue AND o.state IN ('pending', 'running');
                END IF;
                INSERT INTO threadkit_ops (id, queue_id, kind, payload, priority, qos, not_before, max_attempts, backoff_ms, barrier)
                    SELECT u.id, p_queue, u.kind, u.payload, u.priority, u.qos,
                        CASE WHEN u.nb >= 0 THEN to_timestamp(u.nb / 1000.0) ELSE now() + u.delay * interval '1 millisecond' END, u.attempts, u.backoff, u.barrier
                    FROM unnest(p_ids, p_kinds, p_payloads, p_priorities, p_qos, p_not_before_ms, p_delay_ms, p_max_attempts,
                        p_backoff_ms, p_barrier) AS u(id, kind, payload, priority, qos, nb, delay, attempts, backoff, barrier);
                -- after the batch's own rows exist: every dependency must be a row (an index probe each)
                SELECT e.d INTO v_missing FROM unnest(p_edge_dep) AS e(d)
                    WHERE NOT EXISTS (SELECT 1 FROM threadkit_ops o WHERE o.id = e.d) LIMIT 1;
                IF v_missing IS NOT NULL THEN
                    RAISE EXCEPTION 'dependency % is not an operation in this database', v_missing USING ERRCODE = 'TK001';
                END IF;
                INSERT INTO threadkit_op_edges (depends_on, op)
                    SELECT e.dep, e.op FROM unnest(p_edge_op, p_edge_dep) AS e(op, dep) ON CONFLICT DO NOTHING;
                -- barriers, by order of commit (adds hold the queue's advisory lock): an operation waits for
                -- every barrier of its queue open when it is added and for those before it in its batch; a
                -- barrier waits for every operation of its queue open when it is added and for those before
                -- it in its batch (v_open_ops and v_open_barriers were read before the batch's rows existed)
                IF cardinality(v_batch_barriers) > 0 THEN
                    INSERT INTO threadkit_op_edges (depends_on, op)
                        SELECT o.id, b.id FROM unnest(v_batch_barriers) AS b(id) CROSS JOIN unnest(v_open_ops) AS o(id)
                        ON CONFLICT DO NOTHING;
                    INSERT INTO threadkit_op_edges (depends_on, op)
                        SELECT n.id, b.id FROM unnest(v_batch_barriers) AS b(id) JOIN unnest(p_ids) AS n(id) ON n.id < b.id
                        ON CONFLICT DO NOTHING;
                    INSERT INTO threadkit_op_edges (depends_on, op)
                        SELECT b.id, n.id FROM unnest(v_batch_barriers) AS b(id) JOIN unnest(p_ids, p_barrier) AS n(id, is_barrier)
                            ON b.id < n.id AND NOT n.is_barrier
                        ON CONFLICT DO NOTHING;
                END IF;
                IF cardinality(v_open_barriers) > 0 THEN
                    INSERT INTO threadkit_op_edges (depends_on, op)
                        SELECT b.id, n.id FROM unnest(v_open_barriers) AS b(id) CROSS JOIN unnest(p_ids, p_barrier) AS n(id, is_barrier)
                        WHERE NOT n.is_barrier
                        ON CONFLICT DO NOTHING;
                END IF;
                -- hold the dependencies still open (their terminal change waits for this commit), then count them
                PERFORM 1 FROM threadkit_ops d
                    WHERE d.id IN (SELECT e.depends_on FROM threadkit_op_edges e WHERE e.op = ANY(p_ids))
                    ORDER BY d.id FOR SHARE;
                UPDATE threadkit_ops o SET deps_left = c.n
                    FROM (SELECT e.op, count(*) AS n FROM threadkit_op_edges e JOIN threadkit_ops d ON d.id = e.depends_on
                          WHERE e.op = ANY(p_ids) AND d.state IN ('pending', 'running') GROUP BY e.op) c
                    WHERE o.id = c.op;
                PERFORM pg_notify('threadkit_ops', 'n ' || p_queue);
            END $$
            """,
            // Claims up to p_limit ready operations, within the queue's cluster-wide limit.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_claim(
                p_queue integer, p_worker text, p_kinds text[], p_limit integer, p_lease_ms integer)
            RETURNS TABLE(id bigint, kind text, payload text, token bigint, attempt integer, priority smallint, qos smallint,
                cancel_requested boolean)
            LANGUAGE plpgsql AS $$
            DECLARE v_max integer; v_running integer; v_n integer := p_limit;
            BEGIN
                SELECT q.max_concurrent INTO v_max FROM threadkit_queues q WHERE q.id = p_queue;
                IF v_max >= 0 THEN
                    SELECT q.max_concurrent INTO v_max FROM threadkit_queues q WHERE q.id = p_queue FOR UPDATE;
                    SELECT count(*) INTO v_running FROM threadkit_ops o WHERE o.queue_id = p_queue AND o.state = 'running';
                    v_n := least(p_limit, v_max - v_running);
                    IF v_n <= 0 THEN RETURN; END IF;
                END IF;
                RETURN QUERY
                WITH c AS (
                    SELECT o.id FROM threadkit_ops o
                    WHERE o.queue_id = p_queue AND o.state = 'pending' AND o.deps_left = 0 AND o.not_before <= clock_timestamp()
                        AND o.kind = ANY(p_kinds)
                    ORDER BY o.priority DESC, o.qos DESC, o.id LIMIT v_n FOR UPDATE SKIP LOCKED)
                UPDATE threadkit_ops o SET state = 'running', token = nextval('threadkit_op_tokens'), attempt = o.attempt + 1,
                    lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond', worker = p_worker,
                    started_at = clock_timestamp()
                FROM c WHERE o.id = c.id
                RETURNING o.id, o.kind, o.payload, o.token, o.attempt, o.priority, o.qos, o.cancel_requested;
            END $$
            """,
            // Ends runs: success (error NULL), or a failure retried after backoff, or dead when the
            // attempts are spent (cancelled when a cancel was requested). Only the lease's token counts.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_settle(p_ids bigint[], p_tokens bigint[], p_ok boolean[], p_errors text[])
            RETURNS TABLE(id bigint, state text) LANGUAGE plpgsql AS $$
            DECLARE v_ids bigint[]; v_states text[]; v_done bigint[]; v_queues integer[]; v_retry boolean;
            BEGIN
                PERFORM 1 FROM threadkit_ops o WHERE o.id = ANY(p_ids) ORDER BY o.id FOR UPDATE;
                WITH s AS (
                    UPDATE threadkit_ops o SET
                        state = CASE WHEN u.ok THEN 'finished' WHEN o.cancel_requested THEN 'cancelled'
                                     WHEN o.attempt < o.max_attempts THEN 'pending' ELSE 'dead' END,
                        not_before = CASE WHEN NOT u.ok AND NOT o.cancel_requested AND o.attempt < o.max_attempts
                            THEN clock_timestamp() + least(o.backoff_ms::float8 * power(2, o.attempt - 1), 86400000) * interval '1 millisecond'
                            ELSE o.not_before END,
                        last_error = CASE WHEN u.ok THEN o.last_error ELSE u.err END, lease_until = NULL,
                        finished_at = CASE WHEN u.ok OR o.cancel_requested OR o.attempt >= o.max_attempts
                            THEN clock_timestamp() END
                    FROM unnest(p_ids, p_tokens, p_ok, p_errors) AS u(id, token, ok, err)
                    WHERE o.id = u.id AND o.token = u.token AND o.state = 'running'
                    RETURNING o.id, o.state, o.queue_id)
                SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.state), '{}'),
                    coalesce(array_agg(s.id) FILTER (WHERE s.state <> 'pending'), '{}'),
                    coalesce(array_agg(DISTINCT s.queue_id), '{}'), coalesce(bool_or(s.state = 'pending'), false)
                    INTO v_ids, v_states, v_done, v_queues, v_retry FROM s;
                PERFORM threadkit_op_release(v_done);
                PERFORM pg_notify('threadkit_ops', 'f ' || q) FROM unnest(v_queues) AS q;
                IF v_retry THEN PERFORM pg_notify('threadkit_ops', 'n ' || q) FROM unnest(v_queues) AS q; END IF;
                RETURN QUERY SELECT * FROM unnest(v_ids, v_states);
            END $$
            """,
            // Settles and claims in one round trip (a worker's loop): the settled runs first (settled =
            // true: id and state), then the claimed ones (settled = false), which may include dependents
            // the settlement just released.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_cycle(p_ids bigint[], p_tokens bigint[], p_ok boolean[], p_errors text[],
                p_queue integer, p_worker text, p_kinds text[], p_limit integer, p_lease_ms integer)
            RETURNS TABLE(settled boolean, id bigint, state text, kind text, payload text, token bigint, attempt integer,
                priority smallint, qos smallint, cancel_requested boolean)
            LANGUAGE plpgsql AS $$
            BEGIN
                IF cardinality(p_ids) > 0 THEN
                    RETURN QUERY SELECT true, s.id, s.state, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::smallint,
                        NULL::smallint, NULL::boolean
                        FROM threadkit_op_settle(p_ids, p_tokens, p_ok, p_errors) AS s;
                END IF;
                IF p_limit > 0 THEN
                    RETURN QUERY SELECT false, c.id, 'running'::text, c.kind, c.payload, c.token, c.attempt, c.priority, c.qos,
                        c.cancel_requested
                        FROM threadkit_op_claim(p_queue, p_worker, p_kinds, p_limit, p_lease_ms) AS c;
                END IF;
            END $$
            """,
            // Extends leases still held; says which were lost and which have a cancel request.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_renew(p_ids bigint[], p_tokens bigint[], p_lease_ms integer)
            RETURNS TABLE(id bigint, cancel_requested boolean) LANGUAGE sql AS $$
                UPDATE threadkit_ops o SET lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
                FROM unnest(p_ids, p_tokens) AS u(id, token)
                WHERE o.id = u.id AND o.token = u.token AND o.state = 'running'
                RETURNING o.id, o.cancel_requested
            $$
            """,
            // Gives runs back unfinished (graceful shutdown): pending again, the attempt not counted.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_hand_back(p_ids bigint[], p_tokens bigint[]) RETURNS integer
            LANGUAGE plpgsql AS $$
            DECLARE v_n integer; v_queue integer;
            BEGIN
                UPDATE threadkit_ops o SET state = 'pending', attempt = o.attempt - 1, lease_until = NULL, not_before = now()
                FROM unnest(p_ids, p_tokens) AS u(id, token)
                WHERE o.id = u.id AND o.token = u.token AND o.state = 'running';
                GET DIAGNOSTICS v_n = ROW_COUNT;
                FOR v_queue IN SELECT DISTINCT o.queue_id FROM threadkit_ops o WHERE o.id = ANY(p_ids) LOOP
                    PERFORM pg_notify('threadkit_ops', 'n ' || v_queue);
                END LOOP;
                RETURN v_n;
            END $$
            """,
            // Runs whose lease expired (the worker died or stopped renewing): retried, or dead when the
            // attempts are spent.
            """
            CREATE OR REPLACE FUNCTION threadkit_op_rescue() RETURNS integer LANGUAGE plpgsql AS $$
            DECLARE v_done bigint[]; v_queues integer[]; v_n integer;
            BEGIN
                WITH s AS (
                    UPDATE threadkit_ops o SET
                        state = CASE WHEN o.cancel_requested THEN 'cancelled' WHEN o.attempt < o.max_attempts THEN 'pending' ELSE 'dead' END,
                        last_error = 'lease expired: worker ' || coalesce(o.worker, '?') || ' stopped renewing it (token ' || o.token || ')',
                        lease_until = NULL,
                        finished_at = CASE WHEN o.cancel_requested OR o.attempt >= o.max_attempts THEN clock_timestamp() END
                    WHERE o.id IN (SELECT r.id FROM threadkit_ops r WHERE r.state = 'running' AND r.lease_until < clock_timestamp()
                                   ORDER BY r.id FOR UPDATE SKIP LOCKED)
                    RETURNING o.id, o.state, o.queue_id)
                SELECT coalesce(array_agg(s.id) FILTER (WHERE s.state <> 'pending'), '{}'), coalesce(array_agg(DISTINCT s.queue_id), '{}'), count(*)
                    INTO v_done, v_queues, v_n FROM s;
                PERFORM threadkit_op_release(v_done);
                PERFORM pg_notify('threadkit_ops', 'n ' || q) FROM unnest(v_queues) AS q;
                PERFORM pg_notify('threadkit_ops', 'f ' || q) FROM unnest(v_queues) AS q;
                RETURN v_n;
            END $$
            """,
            // Cancels operations (p_ids NULL: every open one of the queue): pending ones end at once,
            // running ones are asked (their handler sees isCancelled).
            """
            CREATE OR REPLACE FUNCTION threadkit_op_cancel(p_queue integer, p_ids bigint[]) RETURNS integer
            LANGUAGE plpgsql AS $$
            DECLARE v_done bigint[]; v_n integer;
            BEGIN
                PERFORM 1 FROM threadkit_ops o WHERE o.queue_id = p_queue AND o.state IN ('pending', 'running')
                    AND (p_ids IS NULL OR o.id = ANY(p_ids)) ORDER BY o.id FOR UPDATE;
                WITH s AS (
                    UPDATE threadkit_ops o SET cancel_requested = true,
                        state = CASE WHEN o.state = 'pending' THEN 'cancelled' ELSE o.state END,
                        finished_at = CASE WHEN o.state = 'pending' THEN clock_timestamp() ELSE o.finished_at END
                    WHERE o.queue_id = p_queue AND o.state IN ('pending', 'running') AND (p_ids IS NULL OR o.id = ANY(p_ids))
                    RETURNING o.id, o.state)
                SELECT coalesce(array_agg(s.id) FILTER (WHERE s.state = 'cancelled'), '{}'), count(*) INTO v_done, v_n FROM s;
                PERFORM threadkit_op_release(v_done);
                PERFORM pg_notify('threadkit_ops', 'c ' || p_queue);
                PERFORM pg_notify('threadkit_ops', 'f ' || p_queue);
                PERFORM pg_notify('threadkit_ops', 'n ' || p_queue);
                RETURN v_n;
            END $$
            """,
        ]
    }
#endif
