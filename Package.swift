// swift-tools-version:6.0
// ThreadKit: Apple's classic threading system rebuilt in Swift for Linux.
// Light dependencies only: the standard library's Synchronization module for atomics and a C
// target for the handful of syscalls Swift cannot call directly.
import PackageDescription

let exportSymbols: [LinkerSetting] = [.unsafeFlags(["-Xlinker", "--export-dynamic"])]

let package = Package(
    name: "ThreadKit",
    products: [
        .library(name: "ThreadKit", targets: ["ThreadKit"]),
        .executable(name: "threadkit", targets: ["threadkit"]),
    ],
    targets: [
        .target(name: "CThreadKit"),
        .target(name: "ThreadKit", dependencies: ["CThreadKit"]),
        // Exported symbols let backtrace_symbols name the frames of diagnostics reports
        // (docs/Diagnostics.md §1, caveats).
        .executableTarget(name: "threadkit", dependencies: ["ThreadKit"], linkerSettings: exportSymbols),
        .testTarget(name: "ThreadKitTests", dependencies: ["ThreadKit", "threadkit"], linkerSettings: exportSymbols),
    ],
    swiftLanguageModes: [.v6]
)
