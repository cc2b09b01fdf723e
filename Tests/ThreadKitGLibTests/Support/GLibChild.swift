// GLibChild: runs `ThreadKitGLibTestChild ROLE` (the test-only helper executable built beside this
// test bundle, Tests/ThreadKitGLibTestChild) to its end and returns its exit status and output. A
// small cousin of ThreadKitTests' ChildProcess, which lives in another test module.
// Foundation's Process is the independent judge; ThreadKit itself never uses it.
#if GLib
    import Foundation
    import XCTest

    struct GLibChildResult {
        /// The exit status, or 128 + the signal that ended it.
        let status: Int32
        let stdout: String
        let stderr: String
        /// Standard output's lines.
        var lines: [String] { stdout.split(separator: "\n").map(String.init) }
        /// The value after `key ` on the line starting with it.
        func value(_ key: String) -> String? {
            lines.first { $0.hasPrefix(key + " ") }.map { String($0.dropFirst(key.count + 1)) }
        }
    }

    enum GLibChild {
        /// Runs ROLE; fails the test (and kills the child) if it has not exited within `timeout`.
        static func run(_ role: String, timeout: TimeInterval = 120, file: StaticString = #filePath, line: UInt = #line) throws
            -> GLibChildResult
        {
            let process = Process()
            let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            process.executableURL = bundle.appendingPathComponent("ThreadKitGLibTestChild")
            process.arguments = [role]
            var environment = ProcessInfo.processInfo.environment
            environment["SWIFT_BACKTRACE"] = "enable=no"
            process.environment = environment
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            // Both pipes are read while the child runs, so neither can fill and stall it.
            let collected = NSLock()
            nonisolated(unsafe) var outData = Data()
            nonisolated(unsafe) var errData = Data()
            let group = DispatchGroup()
            for (handle, isOut) in [(out.fileHandleForReading, true), (err.fileHandleForReading, false)] {
                group.enter()
                Thread.detachNewThread {
                    let data = handle.readDataToEndOfFile()
                    collected.withLock { if isOut { outData = data } else { errData = data } }
                    group.leave()
                }
            }
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                XCTFail("ThreadKitGLibTestChild \(role) did not exit within \(timeout) s", file: file, line: line)
            }
            process.waitUntilExit()
            group.wait()
            let status =
                process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
            return collected.withLock {
                GLibChildResult(
                    status: status, stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData, as: UTF8.self))
            }
        }
    }
#endif
