// ChildProcess: runs `ThreadKitTestChild ROLE ...` (the test-only helper executable built beside
// this test bundle, Tests/ThreadKitTestChild) as a real process, for what needs a program of its
// own (its main thread, limits, user, signals, an environment set before start, a release build)
// and for multi-process tests; and `threadkit COMMAND ...` (the shipped CLI, also built beside it)
// for the tests of `threadkit tour` and `threadkit trace`. A misuse that only has to stop the
// process is an exit test instead (Support/MisuseAssertions.swift).
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
    /// The `ThreadKitTestChild` executable built with this test bundle (same build directory):
    /// `ThreadKitTestChild ROLE ARGUMENT…` runs one role.
    static var executable: URL { builtBesideTheBundle("ThreadKitTestChild") }

    /// The shipped `threadkit` CLI built with this test bundle: `tour` and `trace`.
    static var commandLineTool: URL { builtBesideTheBundle("threadkit") }

    private static func builtBesideTheBundle(_ name: String) -> URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name)
    }

    /// Starts `ThreadKitTestChild role arguments…` without waiting for it, with `environment`
    /// added to this process's.
    static func start(
        _ role: String, _ arguments: [String] = [], environment: [String: String] = [:],
        stdout: Pipe = Pipe(), stderr: Pipe = Pipe()
    ) throws -> Process {
        try launch(executable, [role] + arguments, environment: environment, stdout: stdout, stderr: stderr)
    }

    /// Starts `threadkit arguments…`. Unless `backtracer`, the Swift backtracer is off: a crashing
    /// child would otherwise wait for it, which can take its full 30 s timeout under
    /// ThreadSanitizer; the misuse message is printed before it runs.
    static func launch(
        _ arguments: [String], backtracer: Bool = false,
        stdout: Pipe = Pipe(), stderr: Pipe = Pipe()
    ) throws -> Process {
        try launch(commandLineTool, arguments, backtracer: backtracer, stdout: stdout, stderr: stderr)
    }

    private static func launch(
        _ tool: URL, _ arguments: [String], backtracer: Bool = false, environment added: [String: String] = [:],
        stdout: Pipe, stderr: Pipe
    ) throws -> Process {
        let process = Process()
        process.executableURL = tool
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = backtracer ? nil : "enable=no"
        environment.merge(added) { _, new in new }
        process.environment = environment
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        return process
    }

    /// Runs the role (`ThreadKitTestChild role arguments…`, or another build of the child) with
    /// `environment` added to this process's, to completion (at most `timeout`), and returns its
    /// status and output.
    static func run(
        _ role: String, _ arguments: [String] = [], environment: [String: String] = [:], child: URL? = nil,
        timeout: Duration = .seconds(60)
    ) throws -> ChildResult {
        try runToCompletion(child ?? executable, [role] + arguments, environment: environment, timeout: timeout)
    }

    /// Runs `threadkit arguments…` to completion (at most `timeout`) and returns its status and output.
    static func runCommand(_ arguments: [String], backtracer: Bool = false, timeout: Duration = .seconds(60)) throws -> ChildResult {
        try runToCompletion(commandLineTool, arguments, backtracer: backtracer, timeout: timeout)
    }

    private static func runToCompletion(
        _ tool: URL, _ arguments: [String], backtracer: Bool = false, environment: [String: String] = [:],
        timeout: Duration
    ) throws -> ChildResult {
        let out = Pipe()
        let err = Pipe()
        let process = try launch(tool, arguments, backtracer: backtracer, environment: environment, stdout: out, stderr: err)
        // Drain both pipes on other threads so a chatty child never blocks on a full pipe.
        let outData = DrainedPipe(out)
        let errData = DrainedPipe(err)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.005)
        }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            XCTFail("\(tool.lastPathComponent) \(arguments.joined(separator: " ")) did not finish within \(timeout)")
        }
        process.waitUntilExit()
        return ChildResult(
            status: process.terminationStatus,
            signalled: process.terminationReason == .uncaughtSignal,
            standardOutput: outData.text(), standardError: errData.text())
    }
}

/// Reads a pipe to its end on a background thread.
final class DrainedPipe: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var data = Data() // written by the reader thread before `done` is signalled

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
