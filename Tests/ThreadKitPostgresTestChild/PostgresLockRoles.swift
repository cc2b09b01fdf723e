// PostgresLockRoles: child processes contending for a TKPostgresLock, for ThreadKitPostgresTests
// (started as `ThreadKitPostgresTestChild ROLE ...`, Tests/ThreadKitPostgresTests/Support/
// PostgresChildren.swift). Each prints what it did on standard output, one line per event.
// pglock-hold has a copy in `threadkit-postgres` (Sources/threadkit-postgres/main.swift), the
// tour's PostgreSQL scenario; the benchmarks have their own (tkbench pglock-child).
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    enum PostgresLockRoles {
        static let all: [ChildRole] = [
            ChildRole(
                name: "pglock-loop",
                usage: "URL NAME LOG N (N times: lock, append \"enter PID TOKEN\" and \"exit PID TOKEN\" to LOG, unlock)"
            ) { args in
                guard args.count == 4, let n = Int(args[3]) else { return 2 }
                do {
                    let lock = try TKPostgresLock(name: args[1], url: args[0])
                    guard let log = AppendLog(path: args[2]) else { return 2 }
                    for _ in 0..<n {
                        guard try lock.lock(before: .now + .seconds(120)), let token = lock.fencingToken else {
                            Console.err("pglock-loop: no lock within 120 s")
                            return 1
                        }
                        log.append("enter \(getpid()) \(token)")
                        log.append("exit \(getpid()) \(token)")
                        try lock.unlock()
                    }
                    return 0
                } catch {
                    Console.err("pglock-loop: \(error)")
                    return 1
                }
            },
            ChildRole(name: "pglock-hold", usage: "URL NAME (lock, print \"locked TOKEN\", then hold it until killed)") { args in
                guard args.count == 2 else { return 2 }
                do {
                    let lock = try TKPostgresLock(name: args[1], url: args[0])
                    guard try lock.lock(before: .now + .seconds(120)), let token = lock.fencingToken else { return 1 }
                    Console.out("locked \(token)")
                    while true { TKThread.sleep(for: .seconds(3600)) }
                } catch {
                    Console.err("pglock-hold: \(error)")
                    return 1
                }
            },
            ChildRole(
                name: "pglock-far-deadline",
                usage: "URL NAME 30d|max (lock(before: now + 30 days, or + Int64.max seconds): "
                    + "once free, printing \"free TOKEN\"; then, after printing \"ready\", once held by another session, printing "
                    + "\"acquired TOKEN\")", run: farDeadline),
            ChildRole(
                name: "pglock-config-extremes",
                usage: "URL NAME (connect_timeout=10000000000 in the URL: print \"refused ERROR\"; "
                    + "connectTimeout and statementTimeout of Int64.max seconds: lock, print \"locked TOKEN\", unlock)", run: configExtremes
            ),
        ]

        /// pglock-far-deadline: far deadlines take a free lock and wait for a held one (they threw at
        /// once, or trapped converting to milliseconds).
        @Sendable static func farDeadline(_ args: [String]) -> Int32 {
            guard args.count == 3, args[2] == "30d" || args[2] == "max" else { return 2 }
            let thirtyDays = args[2] == "30d"
            func far() -> ContinuousClock.Instant { thirtyDays ? .now + .seconds(30 * 86_400) : .now + .seconds(Int64.max) }
            do {
                let lock = try TKPostgresLock(name: args[1], url: args[0])
                guard try lock.lock(before: far()), let free = lock.fencingToken else {
                    Console.out("error: no free lock")
                    return 1
                }
                Console.out("free \(free)")
                try lock.unlock()
                Console.out("ready")
                // The parent takes the lock now; wait until it holds it (its own judge is pg_locks).
                while try lock.currentHolder() == nil { TKThread.sleep(for: .milliseconds(10)) }
                guard try lock.lock(before: far()), let token = lock.fencingToken else {
                    Console.out("error: lock(before:) returned false")
                    return 1
                }
                Console.out("acquired \(token)")
                try lock.unlock()
                return 0
            } catch {
                Console.out("error: \(error)")
                return 1
            }
        }

        /// pglock-config-extremes: timeouts far out of range are refused (in a URL) or saturate (set
        /// on a configuration); neither traps.
        @Sendable static func configExtremes(_ args: [String]) -> Int32 {
            guard args.count == 2 else { return 2 }
            do {
                _ = try TKPostgresLock(name: args[1], url: args[0] + "?connect_timeout=10000000000")
                Console.out("error: connect_timeout=10000000000 was accepted")
                return 1
            } catch {
                Console.out("refused \(error)")
            }
            do {
                var configuration = try TKPostgresConfiguration(url: args[0])
                configuration.connectTimeout = .seconds(Int64.max)
                configuration.statementTimeout = .seconds(Int64.max)
                let lock = try TKPostgresLock(name: args[1], configuration: configuration)
                guard try lock.lock(before: .now + .seconds(Int64.max)), let token = lock.fencingToken else {
                    Console.out("error: not locked")
                    return 1
                }
                Console.out("locked \(token)")
                try lock.unlock()
                return 0
            } catch {
                Console.out("error: \(error)")
                return 1
            }
        }
    }
#endif
