// swift-tools-version:6.0
// ThreadKit: Apple's classic threading system rebuilt in Swift for Linux.
// Light dependencies only: the standard library's Synchronization module for atomics and a C
// target for the handful of syscalls Swift cannot call directly. The `ThreadKit` product keeps
// no package dependencies; `ThreadKitPostgres` (a distributed lock on PostgreSQL) is a separate
// product built on vapor/postgres-nio.
import PackageDescription

let exportSymbols: [LinkerSetting] = [.unsafeFlags(["-Xlinker", "--export-dynamic"])]

let package = Package(
    name: "ThreadKit",
    products: [
        .library(name: "ThreadKit", targets: ["ThreadKit"]),
        .executable(name: "threadkit", targets: ["threadkit"]),
        .library(name: "ThreadKitPostgres", targets: ["ThreadKitPostgres"]),
    ],
    dependencies: [
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .target(name: "CThreadKit"),
        .target(name: "ThreadKit", dependencies: ["CThreadKit"]),
        // Exported symbols let backtrace_symbols name the frames of diagnostics reports
        // (docs/Diagnostics.md §1, caveats).
        .executableTarget(name: "threadkit", dependencies: ["ThreadKit", "ThreadKitPostgres"], linkerSettings: exportSymbols),
        .testTarget(name: "ThreadKitTests", dependencies: ["ThreadKit", "threadkit"], linkerSettings: exportSymbols),
        .target(name: "ThreadKitPostgres", dependencies: [
            "ThreadKit",
            .product(name: "PostgresNIO", package: "postgres-nio"),
        ]),
        .testTarget(name: "ThreadKitPostgresTests", dependencies: ["ThreadKitPostgres", "threadkit"]),
    ],
    swiftLanguageModes: [.v6]
)
