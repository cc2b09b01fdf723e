// PostgresChildren: starts `ThreadKitPostgresTestChild ROLE …` (the test-only helper executable
// built beside this test bundle, Tests/ThreadKitPostgresTestChild) or `threadkit-postgres tour
// --child ROLE …` (the tour's children: the queue's worker) for the multi-process tests, with its
// standard output read line by line. A small cousin of ThreadKitTests' ChildProcess,
// which lives in another test module and is not visible here.
// Foundation's Process is the independent judge; ThreadKit itself never uses it.
#if Postgres
    import Foundation
    import XCTest

    final class PostgresChild: @unchecked Sendable {
        let process = Process()
        private let output = Pipe()
        private let lock = NSLock()
        private var lines: [String] = [] // guarded by `lock`
        private var ended = false // guarded by `lock`: the output reached its end
        private var partial = "" // reader thread only
        private let lineArrived = DispatchSemaphore(value: 0)

        /// `ThreadKitPostgresTestChild role arguments…`.
        convenience init(_ role: String, _ arguments: [String]) throws {
            try self.init(executable: "ThreadKitPostgresTestChild", [role] + arguments)
        }

        /// `threadkit-postgres tour --child role arguments…`.
        convenience init(tourChild role: String, _ arguments: [String]) throws {
            try self.init(executable: "threadkit-postgres", ["tour", "--child", role] + arguments)
        }

        private init(executable: String, _ arguments: [String]) throws {
            let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            process.executableURL = bundle.appendingPathComponent(executable)
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            environment["SWIFT_BACKTRACE"] = "enable=no"
            process.environment = environment
            process.standardOutput = output
            try process.run()
            let handle = output.fileHandleForReading
            Thread.detachNewThread { [self] in
                while true {
                    let data = handle.availableData
                    if data.isEmpty {
                        lock.withLock { ended = true }
                        lineArrived.signal()
                        return
                    }
                    partial += String(decoding: data, as: UTF8.self)
                    while let newline = partial.firstIndex(of: "\n") {
                        let line = String(partial[..<newline])
                        partial = String(partial[partial.index(after: newline)...])
                        lock.withLock { lines.append(line) }
                        lineArrived.signal()
                    }
                }
            }
        }

        /// Waits (at most `timeout`) for a line starting with `prefix`; returns it.
        func waitForLine(startingWith prefix: String, timeout: TimeInterval = 60) -> String? {
            let deadline = Date().addingTimeInterval(timeout)
            while true {
                if let line = lock.withLock({ lines.first { $0.hasPrefix(prefix) } }) { return line }
                if lock.withLock({ ended }) { return nil }
                if lineArrived.wait(timeout: .now() + max(0, deadline.timeIntervalSinceNow)) == .timedOut { return nil }
            }
        }

        /// Waits (at most `timeout`) for the child to exit; its status, or nil when it did not.
        func waitForExit(timeout: TimeInterval = 120) -> Int32? {
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            if process.isRunning { return nil }
            process.waitUntilExit()
            return process.terminationStatus
        }

        func kill9() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
#endif
