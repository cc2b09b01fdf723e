// ChildProcess: runs `threadkit child ROLE ...` (the CLI built beside this test bundle) as a real
// process, for misuse diagnostics that must stop a process and for multi-process tests.
// Foundation's Process is used here as the independent judge; ThreadKit itself never uses it.
import Foundation
import XCTest

struct ChildResult {
    let status: Int32
    let signalled: Bool
    let standardOutput: String
    let standardError: String
}

enum ChildProcess {
    /// The `threadkit` executable built with this test bundle (same build directory).
    static var executable: URL {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return bundle.appendingPathComponent("threadkit")
    }

    /// Starts `threadkit child role arguments…` without waiting for it.
    static func start(_ role: String, _ arguments: [String] = [],
                      stdout: Pipe = Pipe(), stderr: Pipe = Pipe()) throws -> Process {
        try launch(["child", role] + arguments, stdout: stdout, stderr: stderr)
    }

    /// Starts `threadkit arguments…`. Unless `backtracer`, the Swift backtracer is off: a crashing
    /// child would otherwise wait for it, which can take its full 30 s timeout under
    /// ThreadSanitizer; the misuse message is printed before it runs.
    static func launch(_ arguments: [String], backtracer: Bool = false,
                       stdout: Pipe = Pipe(), stderr: Pipe = Pipe()) throws -> Process {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = backtracer ? nil : "enable=no"
        process.environment = environment
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        return process
    }

    /// Runs the role to completion (at most `timeout`) and returns its status and output.
    static func run(_ role: String, _ arguments: [String] = [], timeout: Duration = .seconds(60)) throws -> ChildResult {
        try runCommand(["child", role] + arguments, timeout: timeout)
    }

    /// Runs `threadkit arguments…` to completion (at most `timeout`) and returns its status and output.
    static func runCommand(_ arguments: [String], backtracer: Bool = false, timeout: Duration = .seconds(60)) throws -> ChildResult {
        let out = Pipe(), err = Pipe()
        let process = try launch(arguments, backtracer: backtracer, stdout: out, stderr: err)
        // Drain both pipes on other threads so a chatty child never blocks on a full pipe.
        let outData = DrainedPipe(out), errData = DrainedPipe(err)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.005)
        }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            XCTFail("threadkit \(arguments.joined(separator: " ")) did not finish within \(timeout)")
        }
        process.waitUntilExit()
        return ChildResult(status: process.terminationStatus,
                           signalled: process.terminationReason == .uncaughtSignal,
                           standardOutput: outData.text(), standardError: errData.text())
    }
}

/// Reads a pipe to its end on a background thread.
final class DrainedPipe: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var data = Data()   // written by the reader thread before `done` is signalled

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    func text() -> String {
        done.wait()
        return String(decoding: data, as: UTF8.self)
    }
}
