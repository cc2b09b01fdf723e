// threadkit-postgres: the tour's PostgreSQL scenarios, apart from `threadkit` so that the main tour
// builds ThreadKit only (issue 27), and a queue listing. Links ThreadKitPostgres (and so PostgresNIO).
//   threadkit-postgres tour [NAME]   run distributed-lock-postgres (PostgresLockScenario.swift) and
//                                    operation-queue-postgres (PostgresQueueScenario.swift), or the one
//                                    named, against TK_POSTGRES_URL; without it, say how to start a server
//   threadkit-postgres tour --list   the scenarios' names
//   threadkit-postgres queue NAME    a TKPostgresOperationQueue's statistics and operations (QueueListing.swift)
// Hidden: `threadkit-postgres tour --child pglock-hold URL NAME`, the lock scenario's holder process
// (take the lock, print that it holds it, hold it until killed; ThreadKitPostgresTests judge their own
// copy, Tests/ThreadKitPostgresTestChild), and `--child pgqueue-worker URL QUEUE LOG [LEASE_MS CONCURRENCY]`, the
// queue's worker (the scenario's and ThreadKitPostgresTests'). Runs on the main thread.
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    /// A scenario that runs against the server TK_POSTGRES_URL names (`run` gets the URL); without
    /// one it says how to start a throwaway cluster and ends "not run".
    func postgresScenario(
        name: String, title: String, source: String, run: @escaping @Sendable (Narrator, String) throws -> String
    ) -> Scenario {
        Scenario(name: name, title: title, source: source) { say in
            guard let pointer = getenv(TKPostgresConfiguration.environmentVariable) else {
                say.say("TK_POSTGRES_URL is not set, so there is no server to run against. To run this scenario:")
                say.say("  eval \"$(.ci/postgres-cluster.sh start)\" && export TK_POSTGRES_URL   # a throwaway cluster (needs initdb)")
                say.say("  swift run threadkit-postgres tour \(name)")
                say.say("  .ci/postgres-cluster.sh stop \"$TK_POSTGRES_CLUSTER\"")
                return "not run: no server (TK_POSTGRES_URL unset); the lines above say how to start one"
            }
            return try run(say, String(cString: pointer))
        }
    }

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
        if arguments.first == "--child" && arguments.dropFirst().first == "pgqueue-worker" {
            return PostgresQueueScenario.workerRole(Array(arguments.dropFirst(2)))
        }
        let scenarios = [PostgresLockScenario.scenario, PostgresQueueScenario.scenario]
        switch arguments.first {
        case "--list":
            for scenario in scenarios { Console.out("\(scenario.name) \(scenario.title)") }
            return 0
        case nil:
            let failed = scenarios.enumerated().filter { !TourRunner.run($0.element, runsFirst: $0.offset == 0) }.map(\.element.name)
            Console.out(
                "tour: \(scenarios.count - failed.count) of \(scenarios.count) scenarios passed"
                    + (failed.isEmpty ? "" : "; failed: \(failed.joined(separator: ", "))"))
            return failed.isEmpty ? 0 : 1
        default:
            guard let scenario = scenarios.first(where: { $0.name == arguments.first }) else {
                return TourRunner.tourOfOne(scenarios[0], arguments: arguments) // says the argument is unknown
            }
            return TourRunner.tourOfOne(scenario, arguments: [])
        }
    }

    let arguments = Array(CommandLine.arguments.dropFirst())
    switch arguments.first {
    case "tour":
        exit(tour(Array(arguments.dropFirst())))
    case "queue":
        exit(QueueListing.run(Array(arguments.dropFirst())))
    case "--help", "-h", "help", nil:
        Console.out(
            """
            usage: threadkit-postgres tour [--list | NAME]
                   threadkit-postgres queue NAME [--state STATES] [--limit N]
              tour            run the tour's PostgreSQL scenarios (distributed-lock-postgres, operation-queue-postgres)
                              against the server TK_POSTGRES_URL names; without it, say how to start a throwaway one
              tour NAME       run one of them
              tour --list     the scenarios' names
              queue NAME      a TKPostgresOperationQueue's statistics and operations (oldest first; --state
                              pending,running,finished,cancelled,dead filters, --limit N caps, default 50)
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
