// threadkit-postgres: the tour's PostgreSQL scenario, apart from `threadkit` so that the main tour
// builds ThreadKit only (issue 27). Links ThreadKitPostgres (and so PostgresNIO).
//   threadkit-postgres tour        run distributed-lock-postgres (PostgresLockScenario.swift)
//                                  against TK_POSTGRES_URL; without it, say how to start a server
//   threadkit-postgres tour --list the scenario's name
// Hidden: `threadkit-postgres tour --child pglock-hold URL NAME`, the scenario's holder process
// (take the lock, print that it holds it, hold it until killed; ThreadKitPostgresTests judge their own
// copy, Tests/ThreadKitPostgresTestChild). Runs on the main thread.
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    /// The child: holds lock NAME at URL until killed.
    func holdLock(_ arguments: [String]) -> Int32 {
        guard arguments.count == 2 else {
            Console.err("usage: threadkit-postgres tour --child pglock-hold URL NAME (the scenario's own child process)")
            return 2
        }
        do {
            let lock = try TKPostgresLock(name: arguments[1], url: arguments[0])
            guard try lock.lock(before: .now + .seconds(120)), let token = lock.fencingToken else { return 1 }
            Console.out("    child \(getpid()): locked, fencing token \(token)")
            while true { TKThread.sleep(for: .seconds(3600)) }
        } catch {
            Console.err("pglock-hold: \(error)")
            return 1
        }
    }

    func tour(_ arguments: [String]) -> Int32 {
        if arguments.first == "--child" && arguments.dropFirst().first == "pglock-hold" {
            return holdLock(Array(arguments.dropFirst(2)))
        }
        return TourRunner.tourOfOne(PostgresLockScenario.scenario, arguments: arguments)
    }

    let arguments = Array(CommandLine.arguments.dropFirst())
    switch arguments.first {
    case "tour":
        exit(tour(Array(arguments.dropFirst())))
    case "--help", "-h", "help", nil:
        Console.out(
            """
            usage: threadkit-postgres tour [--list]
              tour            run the tour's PostgreSQL scenario (distributed-lock-postgres) against the server
                              TK_POSTGRES_URL names; without it, say how to start a throwaway one
              tour --list     the scenario's name
            The rest of the tour: `swift run threadkit tour`.
            """)
        exit(0)
    default:
        Console.err("threadkit-postgres: unknown command '\(arguments[0])'. Try `threadkit-postgres --help`.")
        exit(2)
    }
#else
    // Built without the Postgres trait (Package.swift): nothing here links PostgresNIO.
    import ChildProcessRoles
    import Glibc

    Console.err(
        "threadkit-postgres: built without ThreadKit's Postgres trait; build and run it with `swift run --traits Postgres threadkit-postgres ...`"
    )
    exit(2)
#endif
