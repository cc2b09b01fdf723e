// MetricsChild: a child process of the metrics tests, `threadkit-metrics tour --child ROLE …` (the
// executable built beside this test bundle; roles in Sources/threadkit-metrics/MetricsChildren.swift),
// with its standard input, output and error on pipes. Foundation's Process is the independent
// launcher. Used by one test thread.
import Foundation
import XCTest

final class MetricsChild {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let error = Pipe()
    private var pending: [UInt8] = []

    init(_ role: String, _ arguments: [String]) throws {
        let tool = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("threadkit-metrics")
        process.executableURL = tool
        process.arguments = ["tour", "--child", role] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        process.standardInput = input
        process.standardOutput = output
        process.standardError = error
        try process.run()
    }

    var pid: pid_t { process.processIdentifier }

    /// The next line of the child's standard output, waiting at most until `deadline`.
    func line(before deadline: ContinuousClock.Instant) -> String? {
        let fd = output.fileHandleForReading.fileDescriptor
        while true {
            if let newline = pending.firstIndex(of: 10) {
                defer { pending.removeSubrange(...newline) }
                return String(decoding: pending[..<newline], as: UTF8.self)
            }
            let left = deadline - .now
            guard left > .zero else { return nil }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(left.components.seconds * 1000 + 1)) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let n = read(fd, &chunk, chunk.count)
            guard n > 0 else { return nil }
            pending += chunk[0..<n]
        }
    }

    /// Closes the child's standard input (its cue to finish), then reads its output and error to
    /// their ends and waits for it, at most until `deadline` (then kills it).
    func finish(before deadline: ContinuousClock.Instant) -> (status: Int32, output: String, error: String) {
        try? input.fileHandleForWriting.close()
        var out = pending
        var err: [UInt8] = []
        let descriptors = [output.fileHandleForReading.fileDescriptor, error.fileHandleForReading.fileDescriptor]
        var open = [true, true]
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while open.contains(true) && ContinuousClock.now < deadline {
            let watched = (0..<2).filter { open[$0] }
            var fds = watched.map { pollfd(fd: descriptors[$0], events: Int16(POLLIN), revents: 0) }
            guard poll(&fds, nfds_t(fds.count), 100) > 0 else { continue }
            for (k, i) in watched.enumerated() where fds[k].revents != 0 {
                let n = read(descriptors[i], &chunk, chunk.count)
                if n <= 0 { open[i] = false } else if i == 0 { out += chunk[0..<n] } else { err += chunk[0..<n] }
            }
        }
        if open.contains(true) {
            process.terminate()
            XCTFail("the child \(process.arguments ?? []) did not finish in time")
        }
        process.waitUntilExit()
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return (status, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}
