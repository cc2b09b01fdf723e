// ThreadKitPostgresTestChild: `ThreadKitPostgresTestChild ROLE [ARGUMENT...]` runs one child
// process of ThreadKitPostgresTests (the roles: PostgresLockRoles.swift; the queue's worker is
// `threadkit-postgres tour --child pgqueue-worker`, the tour's own). A test-only helper
// executable, not a product; it links ThreadKitPostgres (and so PostgresNIO), which is why it is
// apart from Tests/ThreadKitTestChild: the core tests never build PostgresNIO.
#if Postgres
    import ChildProcessRoles
    import Glibc

    exit(
        ChildRole.main(
            PostgresLockRoles.all, Array(CommandLine.arguments.dropFirst()),
            header: "usage: ThreadKitPostgresTestChild ROLE [ARGUMENT...] (a test helper, started by ThreadKitPostgresTests). Roles:"))
#else
    // Built without the Postgres trait (Package.swift): nothing here links PostgresNIO.
    import ChildProcessRoles
    import Glibc

    Console.err(
        "ThreadKitPostgresTestChild: built without ThreadKit's Postgres trait; build and run it with `swift run --traits Postgres ThreadKitPostgresTestChild ...`"
    )
    exit(2)
#endif
