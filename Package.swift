// swift-tools-version:6.0
// ThreadKit: Apple's classic threading system rebuilt in Swift for Linux.
// Light dependencies only: the standard library's Synchronization module for atomics and a C
// target for the handful of syscalls Swift cannot call directly.
import PackageDescription

let package = Package(
    name: "ThreadKit",
    products: [
        .library(name: "ThreadKit", targets: ["ThreadKit"]),
        .executable(name: "threadkit", targets: ["threadkit"]),
    ],
    targets: [
        .target(name: "CThreadKit"),
        .target(name: "ThreadKit", dependencies: ["CThreadKit"]),
        .executableTarget(name: "threadkit", dependencies: ["ThreadKit"]),
        .testTarget(name: "ThreadKitTests", dependencies: ["ThreadKit", "threadkit"]),
    ],
    swiftLanguageModes: [.v6]
)
