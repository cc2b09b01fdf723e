// PostgresQueueRoles: worker processes of a TKPostgresOperationQueue for ThreadKitPostgresTests'
// crash tests (started as `ThreadKitPostgresTestChild pgqueue-worker …`). The handler of kind
// "work" writes an append-only log that the tests judge (one write(2) per line on O_APPEND, so the
// lines of several processes never interleave):
//   start ID TOKEN PID       the handler began a run
//   effect ID TOKEN PID      its fenced write (resource "op-ID") was accepted
//   refused ID TOKEN PID     its fenced write was refused (a later run wrote with a higher token)
//   lost ID TOKEN PID        its fenced write failed on the way (the connection broke: a partition);
//                            the handler then writes again, as a handler that insists on its side
//                            effect would, until the write is accepted or refused (60 s at most)
//   done ID TOKEN PID yes|no STATE   the worker settled the run: accepted by the database or not
// Prints "ready" once its worker runs; runs until killed.
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    enum PostgresQueueRoles {
        /// The payload of kind "work": how long the handler works before its fenced write.
        struct Work: Codable, Sendable {
            var milliseconds: Int
        }

        static let all: [ChildRole] = [
            ChildRole(
                name: "pgqueue-worker",
                usage: "URL QUEUE LOG LEASE_MS CONCURRENCY (run kind \"work\" until killed, logging start/effect/refused/done lines)"
            ) { args in
                guard args.count == 5, let leaseMilliseconds = Int64(args[3]), let concurrency = Int(args[4]) else { return 2 }
                do {
                    let queue = try TKPostgresOperationQueue(name: args[1], url: args[0])
                    let log = open(args[2], O_WRONLY | O_CREAT | O_APPEND, 0o644)
                    guard log >= 0 else { return 2 }
                    let pid = getpid()
                    try queue.register("work", payload: Work.self) { work, context in
                        PostgresLockRoles.appendLine(log, "start \(context.operationID) \(context.token) \(pid)")
                        TKThread.sleep(for: .milliseconds(Int64(work.milliseconds)))
                        let giveUp = ContinuousClock.now + .seconds(60)
                        while true {
                            do {
                                try context.fencedWrite("\(pid)", resource: "op-\(context.operationID)")
                                PostgresLockRoles.appendLine(log, "effect \(context.operationID) \(context.token) \(pid)")
                                return
                            } catch let error as TKError where error.code == .notLockOwner {
                                PostgresLockRoles.appendLine(log, "refused \(context.operationID) \(context.token) \(pid)")
                                throw error
                            } catch {
                                PostgresLockRoles.appendLine(log, "lost \(context.operationID) \(context.token) \(pid)")
                                if ContinuousClock.now >= giveUp { throw error }
                                TKThread.sleep(for: .milliseconds(50))
                            }
                        }
                    }
                    _ = try queue.startWorker(
                        concurrency: concurrency, lease: .milliseconds(leaseMilliseconds), pollInterval: .milliseconds(200)
                    ) { settled in
                        PostgresLockRoles.appendLine(
                            log,
                            "done \(settled.operationID) \(settled.token) \(pid) \(settled.accepted ? "yes" : "no") \(settled.state ?? "-")"
                        )
                    }
                    Console.out("ready")
                    while true { TKThread.sleep(for: .seconds(3600)) }
                } catch {
                    Console.err("pgqueue-worker: \(error)")
                    return 1
                }
            }
        ]
    }
#endif
