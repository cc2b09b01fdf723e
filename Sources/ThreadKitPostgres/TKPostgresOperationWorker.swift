// TKPostgresOperationWorker: runs a TKPostgresOperationQueue's operations in this process. It
// claims ready operations of the kinds registered here (threadkit_op_claim: SELECT … FOR UPDATE
// SKIP LOCKED, within the queue's cluster-wide limit), each claim a lease with a fencing token, and
// runs their handlers on a local TKOperationQueue (ThreadKit's pool) at the operation's priority
// and QoS. Three threads of its own, each with its own session:
//   loop       settles ended runs in batches (threadkit_op_settle, which refuses a run whose
//              token is no longer the operation's) and claims up to the free local slots, both
//              in one round trip (threadkit_op_cycle, one transaction); with
//              nothing to do it waits for a notification ("n"/"f" of its queue), or the next
//              scheduled operation, or `pollInterval` (the fallback when notifications are lost);
//   heartbeat  every lease/3 renews the leases it holds (a lease not renewed is lost: its
//              handler sees isCancelled and isLeaseLost), reads cancel requests (at once on a "c"
//              notification), and every lease/2 rescues expired leases of any worker
//              (threadkit_op_rescue: retried, or dead when the attempts are spent);
//   listener   OperationNotificationListener's session.
// `shutdown(before:)`: no new claims; running handlers finish until the deadline, then the rest
// are handed back (pending again, their attempt not counted) and their handlers see isCancelled.
//
// Threads: public members from any thread. `state` is guarded by `lock` (short, never held across
// a network wait); handlers run on the local queue's threads and only touch `state` under `lock`.
#if Postgres
    import Glibc
    import PostgresNIO
    import ThreadKit

    /// A process's worker for one `TKPostgresOperationQueue`.
    // safety: `state` is guarded by `lock`, `effectsSession` by `effectsLock`; `loopThread` and
    // `beatThread` are written once in init before the threads start; the rest is immutable.
    public final class TKPostgresOperationWorker: @unchecked Sendable {
        /// How a run ended, as the database accepted it, for `onSettled`.
        public struct Settlement: Sendable {
            /// The operation.
            public let operationID: Int64
            /// The run's fencing token.
            public let token: Int64
            /// True when the database took the result; false when the lease had been lost (the run's
            /// result was refused: another run owns the operation).
            public let accepted: Bool
            /// The operation's state after this run: finished, pending (retry), cancelled or dead; nil
            /// when refused.
            public let state: String?
        }

        /// The queue it works for.
        public let queue: TKPostgresOperationQueue
        /// Handlers run at once at most (the local queue's maxConcurrentOperationCount).
        public let concurrency: Int
        /// How long a claim holds an operation without renewal.
        public let lease: Duration
        /// The longest wait between claims when no notification comes.
        public let pollInterval: Duration
        /// This worker's name in the database ("host pid N #K").
        public let identity: String

        struct Run {
            let token: Int64
            let context: TKPostgresOperationContext
        }
        struct Settle {
            let id: Int64
            let token: Int64
            let ok: Bool
            let error: String
        }
        struct State {
            var running: [Int64: Run] = [:]
            var settles: [Settle] = []
            var draining = false
            var stopped = false
        }
        private let lock = TKLock()
        private var state = State() // guarded by `lock`
        private let wake = TKDispatchSemaphore(value: 0)
        private let beatWake = TKDispatchSemaphore(value: 0)
        private let local = TKOperationQueue()
        private let listener: OperationNotificationListener
        private let onSettled: (@Sendable (Settlement) -> Void)?
        private let kinds: [String: TKPostgresOperationQueue.Runner]
        private let effectsLock = TKLock()
        private var effectsSession: PostgresSession? // guarded by `effectsLock`
        private var loopThread: TKThread?
        private var beatThread: TKThread?
        private let loopDone = TKDispatchSemaphore(value: 0)
        private let beatDone = TKDispatchSemaphore(value: 0)
        private static let counter = TKAtomicInt64(0)

        init(
            queue: TKPostgresOperationQueue, concurrency: Int, lease: Duration, pollInterval: Duration,
            onSettled: (@Sendable (Settlement) -> Void)?
        ) throws {
            guard (1...10_000).contains(concurrency) else {
                throw TKError(
                    .invalidArgument, "\(queue.owner).startWorker(concurrency: \(concurrency)): use 1…10,000. Fix: pass a positive count.")
            }
            guard lease >= .milliseconds(300) && lease <= .seconds(86_400) else {
                throw TKError(
                    .invalidArgument,
                    "\(queue.owner).startWorker(lease: \(lease)): use 300 ms…1 day; it is renewed every third of itself, and a "
                        + "shorter lease expires under a briefly slow server. Fix: pass a longer lease.")
            }
            self.queue = queue
            self.concurrency = concurrency
            self.lease = lease
            self.pollInterval = max(.milliseconds(10), pollInterval)
            self.onSettled = onSettled
            kinds = queue.registeredKinds
            if kinds.isEmpty {
                throw TKError(
                    .invalidArgument,
                    "\(queue.owner).startWorker: no kind is registered in this process, so it could claim nothing. "
                        + "Fix: call register(_:payload:handler:) for each kind before starting a worker.")
            }
            identity = "\(TKPostgresLock.hostName) pid \(getpid()) #\(Self.counter.increment())"
            local.maxConcurrentOperationCount = concurrency
            local.name = "TKPostgresOperationWorker(\(queue.name.prefix(32)))"
            let wake = self.wake
            let beatWake = self.beatWake
            listener = OperationNotificationListener(configuration: queue.configuration, owner: queue.owner, queueID: queue.queueID) {
                kind in
                if kind == "c" { beatWake.signal() } else { wake.signal() }
            }
            // Connect the loop's session before returning, so that a bad server fails the start.
            let loopSession = try PostgresSession.connect(queue.configuration, owner: queue.owner + " (worker)")
            listener.ensure()
            let loop = TKThread(name: "TKPostgresOperationWorker.loop") { [self] in
                runLoop(loopSession)
                loopDone.signal()
            }
            let beat = TKThread(name: "TKPostgresOperationWorker.heartbeat") { [self] in
                runHeartbeat()
                beatDone.signal()
            }
            loopThread = loop
            beatThread = beat
            loop.start()
            beat.start()
        }

        /// Handlers running now.
        public var runningCount: Int { lock.withLock { state.running.count } }

        /// Stops claiming; waits until the running handlers finish or `deadline` passes, then hands the
        /// rest back (pending again, the attempt not counted; their handlers see `isCancelled`), settles
        /// what ended, and stops its threads. Returns how many runs were handed back.
        @discardableResult
        public func shutdown(before deadline: ContinuousClock.Instant) -> Int {
            lock.withLock { state.draining = true }
            wake.signal()
            while lock.withLock({ !state.running.isEmpty }) && ContinuousClock.now < deadline {
                TKThread.sleep(for: .milliseconds(5))
            }
            let left = lock.withLock { () -> [Int64: Run] in
                let left = state.running
                state.running = [:]
                return left
            }
            for run in left.values { run.context.markCancelled() }
            var handedBack = 0
            if !left.isEmpty {
                let ids = Array(left.keys)
                let tokens = ids.map { left[$0]!.token }
                if let session = try? PostgresSession.connect(queue.configuration, owner: queue.owner + " (worker shutdown)") {
                    let rows = try? session.query("SELECT threadkit_op_hand_back(\(ids), \(tokens))", what: "handing back runs")
                    handedBack = Int((try? rows?.first?.decode(Int32.self)) ?? 0)
                    session.close()
                }
            }
            lock.withLock { state.stopped = true }
            wake.signal()
            beatWake.signal()
            _ = loopDone.wait(until: .now + .seconds(30))
            _ = beatDone.wait(until: .now + .seconds(30))
            listener.close()
            effectsLock.withLock {
                effectsSession?.close()
                effectsSession = nil
            }
            return handedBack
        }

        // MARK: The loop

        private func runLoop(_ first: PostgresSession) {
            var session: PostgresSession? = first
            let kindList = Array(kinds.keys)
            let leaseMilliseconds = Int32(clamping: DeadlineArithmetic.millisecondsRoundedUp(lease))
            while true {
                let (settles, free, draining, stopped) = lock.withLock { () -> ([Settle], Int, Bool, Bool) in
                    let settles = state.settles
                    state.settles = []
                    return (settles, concurrency - state.running.count, state.draining, state.stopped)
                }
                if stopped && settles.isEmpty { break }
                do {
                    if session == nil || session!.isClosed {
                        session?.close()
                        session = try PostgresSession.connect(queue.configuration, owner: queue.owner + " (worker)")
                    }
                    let live = session!
                    let limit: Int32 = !draining && !stopped && free > 0 ? Int32(min(free, 256)) : 0
                    if settles.isEmpty && limit == 0 {
                        if stopped { break }
                        _ = wake.wait(until: .now + pollInterval)
                        continue
                    }
                    // One round trip: settle what ended, then claim up to the free slots.
                    let rows = try live.query(
                        """
                        SELECT settled, id, state, kind, payload, token, attempt, priority::integer, qos::integer, cancel_requested
                        FROM threadkit_op_cycle(\(settles.map(\.id)), \(settles.map(\.token)), \(settles.map(\.ok)), \(settles.map(\.error)),
                            \(queue.queueID), \(identity), \(kindList), \(limit), \(leaseMilliseconds))
                        """, what: "settling \(settles.count) run(s) and claiming up to \(limit)")
                    var accepted: [Int64: String] = [:]
                    var claimed: [Claim] = []
                    for row in rows {
                        let (settled, id, state, kind, payload, token, attempt, priority, qos, cancelRequested) = try row.decode(
                            (Bool, Int64, String, String?, String?, Int64?, Int32?, Int32?, Int32?, Bool?).self)
                        if settled {
                            accepted[id] = state
                        } else {
                            let context = TKPostgresOperationContext(
                                operationID: id, token: token ?? 0, attempt: Int(attempt ?? 1), kind: kind ?? "",
                                effects: { [weak self] in try self?.effects() ?? Self.gone() })
                            if cancelRequested ?? false { context.markCancelled() }
                            claimed.append(Claim(context: context, payload: payload ?? "null", priority: priority ?? 0, qos: qos ?? 0))
                        }
                    }
                    report(settles, accepted)
                    if !claimed.isEmpty { start(claimed) }
                    if !claimed.isEmpty || !settles.isEmpty { continue }
                    if stopped { break }
                    _ = wake.wait(until: .now + (try nextDue(live)))
                } catch {
                    // The server is unreachable, or refused (a deadlock victim, 40P01: nothing changed):
                    // keep what must be settled, retry shortly; a lost session is replaced.
                    lock.withLock { state.settles.insert(contentsOf: settles, at: 0) }
                    if (error as? TKError)?.code != .protocolViolation || session?.isClosed == true {
                        session?.close()
                        session = nil
                    }
                    _ = wake.wait(until: .now + .milliseconds(100))
                }
            }
            session?.close()
        }

        /// How long to wait before claiming again: until the next scheduled operation, at most `pollInterval`.
        private func nextDue(_ session: PostgresSession) throws -> Duration {
            let rows = try session.query(
                """
                SELECT (extract(epoch FROM min(not_before) - clock_timestamp()) * 1000000)::bigint FROM threadkit_ops
                WHERE queue_id = \(queue.queueID) AND state = 'pending' AND deps_left = 0 AND not_before > clock_timestamp()
                """, what: "looking for the next scheduled operation")
            guard let micros = try rows.first?.decode(Int64?.self) else { return pollInterval }
            return min(pollInterval, .microseconds(max(1000, micros)))
        }

        /// Tells `onSettled` how each run ended: accepted (with the state after it) or refused.
        private func report(_ settles: [Settle], _ accepted: [Int64: String]) {
            guard let onSettled else { return }
            for settle in settles {
                let state = accepted[settle.id]
                onSettled(Settlement(operationID: settle.id, token: settle.token, accepted: state != nil, state: state))
            }
        }

        /// One claimed run, as threadkit_op_cycle returned it: its context (id, token, attempt, kind,
        /// and whether a cancel was requested), its payload and where the local queue puts it.
        struct Claim {
            let context: TKPostgresOperationContext
            let payload: String
            let priority: Int32
            let qos: Int32
        }

        private func start(_ claims: [Claim]) {
            lock.withLock {
                for claim in claims { state.running[claim.context.operationID] = Run(token: claim.context.token, context: claim.context) }
            }
            // Highest priority first, then QoS, then FIFO: the local queue starts them in that order too.
            let ordered = claims.sorted {
                ($0.priority, $0.qos, -$0.context.operationID) > ($1.priority, $1.qos, -$1.context.operationID)
            }
            for claim in ordered {
                let (id, context, payload, runner) = (claim.context.operationID, claim.context, claim.payload, kinds[claim.context.kind])
                let operation = TKBlockOperation { [self] in
                    var ok = true
                    var message = ""
                    if let runner {
                        do { try runner(payload, context) } catch {
                            ok = false
                            message = (error as? TKError)?.message ?? "\(error)"
                        }
                    } else {
                        ok = false
                        message = "no handler for kind \"\(context.kind)\" in worker \(identity)"
                    }
                    lock.withLock {
                        if state.running.removeValue(forKey: id) != nil {
                            state.settles.append(Settle(id: id, token: context.token, ok: ok, error: message))
                        }
                    }
                    wake.signal()
                }
                operation.queuePriority = TKOperation.QueuePriority(rawValue: Int(claim.priority)) ?? .normal
                operation.qualityOfService = TKPostgresOperationQueue.qos(rank: Int(claim.qos))
                local.addOperation(operation)
            }
        }

        private static func gone() throws -> PostgresSession {
            throw TKError(.invalidArgument, "TKPostgresOperationContext: its worker is gone. Fix: do not keep a context past its handler.")
        }

        /// The session handlers' fenced writes share (the connection queues concurrent queries).
        private func effects() throws -> PostgresSession {
            try effectsLock.withLock {
                if let effectsSession, !effectsSession.isClosed { return effectsSession }
                effectsSession?.close()
                let fresh = try PostgresSession.connect(queue.configuration, owner: queue.owner + " (fenced writes)")
                effectsSession = fresh
                return fresh
            }
        }

        // MARK: The heartbeat

        private func runHeartbeat() {
            var session: PostgresSession?
            defer { session?.close() }
            let beat = max(.milliseconds(100), lease / 3)
            let leaseMilliseconds = Int32(clamping: DeadlineArithmetic.millisecondsRoundedUp(lease))
            var nextRescue = ContinuousClock.now
            var nextBeat = ContinuousClock.now + beat
            while !lock.withLock({ state.stopped }) {
                let woken = beatWake.wait(until: min(nextBeat, nextRescue)) == .success
                if lock.withLock({ state.stopped }) { break }
                listener.ensure()
                do {
                    if session == nil || session!.isClosed {
                        session?.close()
                        session = try PostgresSession.connect(queue.configuration, owner: queue.owner + " (worker heartbeat)")
                    }
                    let live = session!
                    let now = ContinuousClock.now
                    if woken || now >= nextBeat {
                        if !woken { nextBeat = now + beat }
                        let running = lock.withLock { state.running }
                        if !running.isEmpty {
                            let ids = Array(running.keys)
                            let tokens = ids.map { running[$0]!.token }
                            let rows = try live.query(
                                "SELECT id, cancel_requested FROM threadkit_op_renew(\(ids), \(tokens), \(leaseMilliseconds))",
                                what: "renewing leases")
                            var held: Set<Int64> = []
                            for row in rows {
                                let (id, cancelRequested) = try row.decode((Int64, Bool).self)
                                held.insert(id)
                                if cancelRequested { running[id]?.context.markCancelled() }
                            }
                            for (id, run) in running where !held.contains(id) { run.context.markLeaseLost() }
                        }
                    }
                    if now >= nextRescue {
                        nextRescue = now + max(.milliseconds(100), lease / 2)
                        _ = try live.query("SELECT threadkit_op_rescue()", what: "rescuing expired leases")
                    }
                } catch {
                    session?.close()
                    session = nil
                    nextBeat = min(nextBeat, .now + .milliseconds(100))
                }
            }
        }
    }

    extension TKPostgresOperationQueue {
        /// Starts a worker in this process: it runs the kinds registered on this object, at most
        /// `concurrency` handlers at once, each claim a lease of `lease` renewed every third of it,
        /// waiting for work by LISTEN/NOTIFY with `pollInterval` as the fallback. It runs until
        /// `shutdown(before:)` (its threads keep it alive); `onSettled` is called on its loop thread
        /// for each run it settles.
        public func startWorker(
            concurrency: Int = 8, lease: Duration = .seconds(30), pollInterval: Duration = .seconds(1),
            onSettled: (@Sendable (TKPostgresOperationWorker.Settlement) -> Void)? = nil
        ) throws -> TKPostgresOperationWorker {
            try TKPostgresOperationWorker(
                queue: self, concurrency: concurrency, lease: lease, pollInterval: pollInterval, onSettled: onSettled)
        }
    }
#endif
