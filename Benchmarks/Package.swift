// swift-tools-version:6.1
// ThreadKit's benchmarks: ours against the incumbents (Foundation, libdispatch, pthreads, the
// standard library's Synchronization), in one process, interleaved. A separate package so heavy
// dependencies never reach the library. Run: swift run -c release --package-path Benchmarks
//
// The glib group needs GLib's headers (libglib2.0-dev), so it is behind this package's trait
// `GLib`: `swift run -c release --package-path Benchmarks --traits GLib tkbench glib`. Without it
// the package builds on a machine with no GLib, and the group says what to install and is skipped.
import PackageDescription

let package = Package(
    name: "ThreadKitBenchmarks",
    traits: [
        .trait(
            name: "GLib",
            description: "the glib group (ThreadKitGLib against GLib's own main loop): needs libglib2.0-dev (pkg-config glib-2.0)")
    ],
    dependencies: [
        // ThreadKitPostgres and ThreadKitGLib are behind ThreadKit's package traits Postgres and
        // GLib; ThreadKit's GLib trait follows this package's.
        .package(
            name: "ThreadKit", path: "..",
            traits: ["Postgres", .trait(name: "GLib", condition: .when(traits: ["GLib"]))]),
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
                .product(name: "ThreadKitGLib", package: "ThreadKit", condition: .when(traits: ["GLib"])),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ])
    ],
    swiftLanguageModes: [.v6]
)
