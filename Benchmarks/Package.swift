// swift-tools-version:6.1
// ThreadKit's benchmarks: ours against the incumbents (Foundation, libdispatch, pthreads, the
// standard library's Synchronization), in one process, interleaved. A separate package so heavy
// dependencies never reach the library. Run: swift run -c release --package-path Benchmarks
import PackageDescription

let package = Package(
    name: "ThreadKitBenchmarks",
    dependencies: [
        // ThreadKitPostgres and ThreadKitGLib are behind ThreadKit's package traits Postgres and GLib.
        .package(name: "ThreadKit", path: "..", traits: ["Postgres", "GLib"]),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .executableTarget(
            name: "tkbench",
            dependencies: [
                .product(name: "ThreadKit", package: "ThreadKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ThreadKitPostgres", package: "ThreadKit"),
                .product(name: "ThreadKitGLib", package: "ThreadKit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ])
    ],
    swiftLanguageModes: [.v6]
)
