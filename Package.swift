// swift-tools-version:6.1
// ThreadKit: Apple's classic threading system rebuilt in Swift for Linux.
// Light dependencies only: the standard library's Synchronization module for atomics and a C
// target for the handful of syscalls Swift cannot call directly. The `ThreadKit` product keeps
// no package dependencies; `ThreadKitPostgres` (a distributed lock on PostgreSQL) is a separate
// product built on vapor/postgres-nio, behind the package trait `Postgres` (off by default), so
// that neither `swift build` nor `swift test` builds SwiftNIO or PostgresNIO unless asked:
//   swift build --traits Postgres                   the lock, its tests and its tour scenario too
//   .package(url: …, from: …, traits: ["Postgres"])  a client that uses ThreadKitPostgres
// With the trait off, the Postgres targets compile to nothing (their sources are `#if Postgres`)
// and their executables say how to build them.
//
// Layout (issue 27): what ships and what only tests use are apart, and PostgresNIO is built only
// with the Postgres trait.
//   Sources/ThreadKit, Sources/CThreadKit        the library (product ThreadKit)
//   Sources/threadkit                            the CLI: `tour` and `trace` (product threadkit);
//                                                ThreadKit only, so `swift run threadkit tour`
//                                                builds no SwiftNIO; its scenarios' child
//                                                processes are `threadkit tour --child ROLE`
//   Sources/ThreadKitPostgres                    the PostgreSQL lock (product ThreadKitPostgres)
//   Sources/ChildProcessRoles                    the child-process roles the tour and the tests both
//                                                start, and their helpers (a target, not a product)
//   Sources/threadkit-postgres                   the tour's PostgreSQL scenario (product
//                                                threadkit-postgres: `swift run threadkit-postgres tour`)
//   Tests/ThreadKitTestChild                     test-only executable, not a product: the child
//                                                processes of ThreadKitTests (`ThreadKitTestChild ROLE`)
//   Tests/ThreadKitPostgresTestChild             the same for ThreadKitPostgresTests
//   Tests/ThreadKitTests, Tests/ThreadKitPostgresTests   the test targets
//   Sources/ThreadKitMetrics                     the metrics exporter on apple/swift-metrics (product
//                                                ThreadKitMetrics; docs/Metrics.md); with the Postgres
//                                                trait also TKPostgresOperationQueue's statistics
//   Sources/threadkit-metrics                    the tour's metrics scenario on swift-prometheus (product
//                                                threadkit-metrics: `swift run threadkit-metrics tour`)
//   Tests/ThreadKitMetricsTests                  its tests
//   Sources/CGLib, Sources/ThreadKitGLib         GLib's main loop runs TKRunLoop and TKRunLoop runs
//                                                GMainContexts (product ThreadKitGLib; docs/GLib.md),
//                                                behind the trait `GLib` (needs libglib2.0-dev)
//   Sources/threadkit-glib                       the tour's GLib scenario (`swift run --traits GLib
//                                                threadkit-glib tour`)
//   Tests/ThreadKitGLibTestChild, Tests/ThreadKitGLibTests   its child processes and tests
// A test target's dependency on an executable target builds that executable beside the test bundle,
// where the tests' ChildProcess / PostgresChild find it.
import PackageDescription

let exportSymbols: [LinkerSetting] = [.unsafeFlags(["-Xlinker", "--export-dynamic"])]

let package = Package(
    name: "ThreadKit",
    products: [
        // Static, so that `swift build --product ThreadKit` builds the library alone (SwiftPM refuses
        // --product for an automatic library product and builds every target instead).
        .library(name: "ThreadKit", type: .static, targets: ["ThreadKit"]),
        .executable(name: "threadkit", targets: ["threadkit"]),
        .library(name: "ThreadKitPostgres", targets: ["ThreadKitPostgres"]),
        .executable(name: "threadkit-postgres", targets: ["threadkit-postgres"]),
        .library(name: "ThreadKitGLib", targets: ["ThreadKitGLib"]),
        .executable(name: "threadkit-glib", targets: ["threadkit-glib"]),
        .library(name: "ThreadKitMetrics", targets: ["ThreadKitMetrics"]),
        .executable(name: "threadkit-metrics", targets: ["threadkit-metrics"]),
    ],
    traits: [
        .trait(
            name: "Postgres",
            description:
                "ThreadKitPostgres (the distributed lock on PostgreSQL), its tests and tour scenario: builds SwiftNIO and PostgresNIO"),
        .trait(
            name: "GLib",
            description:
                "ThreadKitGLib (TKRunLoop run by GLib's main loop, GMainContexts run by ThreadKit loops), its tests and tour scenario: needs libglib2.0-dev (pkg-config glib-2.0)"
        ),
    ],
    dependencies: [
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Documentation only: `swift package generate-documentation` (.ci/docs.sh). A plugin
        // dependency no target uses, so no product of this package links anything from it (as
        // SwiftNIO does).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // ThreadKitMetrics (swift-metrics) and its tour scenario and tests (swift-prometheus).
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        .target(name: "CThreadKit"),
        .target(name: "ThreadKit", dependencies: ["CThreadKit"]),
        // Exported symbols let dladdr name frames when the binary is stripped (docs/Diagnostics.md §7).
        .executableTarget(name: "threadkit", dependencies: ["ThreadKit", "ChildProcessRoles"], linkerSettings: exportSymbols),
        // The child-process roles (and their small helpers) that the tour and the tests both start;
        // a library target named by no product (Sources/ChildProcessRoles/ChildRole.swift).
        .target(name: "ChildProcessRoles", dependencies: ["ThreadKit", .target(name: "CGLib", condition: .when(traits: ["GLib"]))]),
        // Test-only helper executables (no product names them): the tests' child processes.
        .executableTarget(
            name: "ThreadKitTestChild", dependencies: ["ThreadKit", "CThreadKit", "ChildProcessRoles"],
            path: "Tests/ThreadKitTestChild", linkerSettings: exportSymbols),
        // ThreadKitTests also runs the shipped CLI (`threadkit tour NAME`, `threadkit trace`), which
        // links ThreadKit only.
        .testTarget(
            name: "ThreadKitTests", dependencies: ["ThreadKit", "ChildProcessRoles", "ThreadKitTestChild", "threadkit"],
            linkerSettings: exportSymbols),
        .target(
            name: "ThreadKitPostgres",
            dependencies: [
                "ThreadKit",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ]),
        .executableTarget(name: "threadkit-postgres", dependencies: ["ThreadKit", "ThreadKitPostgres", "ChildProcessRoles"]),
        .executableTarget(
            name: "ThreadKitPostgresTestChild", dependencies: ["ThreadKit", "ThreadKitPostgres", "ChildProcessRoles"],
            path: "Tests/ThreadKitPostgresTestChild"),
        // ThreadKitPostgresTests also check TKPostgresQueueMetrics (ThreadKitMetrics, judged with
        // MetricsTestKit) against the server, and that `threadkit-postgres queue NAME` lists the same figures.
        .testTarget(
            name: "ThreadKitPostgresTests",
            dependencies: [
                "ThreadKitPostgres", "ThreadKitPostgresTestChild", "ThreadKitMetrics", "threadkit-postgres",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        // GLib through pkg-config; only targets built with the GLib trait depend on it (their sources
        // are `#if GLib`), so a machine without libglib2.0-dev builds and tests everything else.
        .systemLibrary(name: "CGLib", pkgConfig: "glib-2.0", providers: [.apt(["libglib2.0-dev"])]),
        .target(name: "ThreadKitGLib", dependencies: ["ThreadKit", .target(name: "CGLib", condition: .when(traits: ["GLib"]))]),
        .executableTarget(
            name: "threadkit-glib",
            dependencies: ["ThreadKit", "ThreadKitGLib", "ChildProcessRoles", .target(name: "CGLib", condition: .when(traits: ["GLib"]))]),
        .executableTarget(
            name: "ThreadKitGLibTestChild",
            dependencies: ["ThreadKit", "ThreadKitGLib", "ChildProcessRoles", .target(name: "CGLib", condition: .when(traits: ["GLib"]))],
            path: "Tests/ThreadKitGLibTestChild"),
        .testTarget(name: "ThreadKitGLibTests", dependencies: ["ThreadKitGLibTestChild"]),
        // ThreadKitMetrics also exports TKPostgresOperationQueue's statistics (TKPostgresQueueMetrics),
        // so it depends on ThreadKitPostgres, with the Postgres trait only: without the trait it builds
        // no SwiftNIO; with it, the package that asked for the trait builds PostgresNIO anyway. The
        // bridge lives here rather than in ThreadKitPostgres so that ThreadKitPostgres stays on
        // PostgresNIO alone (a queue user who exports no metrics links no swift-metrics) and the
        // metric names and labels are all defined in one module.
        .target(
            name: "ThreadKitMetrics",
            dependencies: [
                "ThreadKit", .product(name: "Metrics", package: "swift-metrics"), .product(name: "CoreMetrics", package: "swift-metrics"),
                .target(name: "ThreadKitPostgres", condition: .when(traits: ["Postgres"])),
            ]),
        .executableTarget(
            name: "threadkit-metrics",
            dependencies: ["ThreadKit", "ThreadKitMetrics", "ChildProcessRoles", .product(name: "Prometheus", package: "swift-prometheus")]),
        .testTarget(
            name: "ThreadKitMetricsTests",
            dependencies: [
                "ThreadKit", "ThreadKitMetrics", "threadkit-metrics", "ChildProcessRoles",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
