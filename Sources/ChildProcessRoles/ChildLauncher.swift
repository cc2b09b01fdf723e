// ChildLauncher: starts this same executable (`/proc/self/exe tour --child ROLE ...`: threadkit's
// roles in Sources/threadkit/Tour/TourChildren.swift, threadkit-postgres's in its main.swift) as a
// child process for the tour's multi-process scenarios, and waits for it. Called from the tour's
// thread.
// A child whose standard error is captured writes it into a pipe that only the launching thread
// reads; its standard output stays the tour's.
import Glibc

package struct ChildLauncher {
    package let pid: pid_t
    /// The read end of the child's standard error when captured; owned by the launching thread.
    private let errorPipe: Int32?

    /// Starts `EXECUTABLE tour --child role arguments…` (this executable) with the tour's standard streams; with
    /// `captureStandardError`, standard error goes to a pipe read by `waitCapturingStandardError()`,
    /// and the child's Swift backtracer is turned off (a crash then reports its message only).
    package init(_ role: String, _ arguments: [String], captureStandardError: Bool = false) throws {
        let argv = [TourRunner.executableName, "tour", "--child", role] + arguments
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var environment: [UnsafeMutablePointer<CChar>?] = []
        var index = 0
        while let entry = environ[index] {
            if !captureStandardError || !String(cString: entry).hasPrefix("SWIFT_BACKTRACE=") { environment.append(strdup(entry)) }
            index += 1
        }
        if captureStandardError { environment.append(strdup("SWIFT_BACKTRACE=enable=no")) }
        environment.append(nil)
        defer { environment.forEach { free($0) } }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var fds: [Int32] = [-1, -1]
        if captureStandardError {
            guard pipe(&fds) == 0 else { throw ScenarioFailure("pipe failed: \(String(cString: strerror(errno)))") }
            // Neither end may leak into the child beyond the dup2 onto its standard error.
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        }
        var pid: pid_t = 0
        let r = posix_spawn(&pid, "/proc/self/exe", &actions, nil, &cArgs, &environment)
        if captureStandardError { close(fds[1]) }
        guard r == 0 else {
            if captureStandardError { close(fds[0]) }
            throw ScenarioFailure("posix_spawn failed: \(String(cString: strerror(r)))")
        }
        self.pid = pid
        errorPipe = captureStandardError ? fds[0] : nil
    }

    /// Waits for the child and returns its exit status (128 + signal when killed).
    package func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }

    /// Reads the captured standard error to its end, then waits for the child.
    package func waitCapturingStandardError() -> (status: Int32, standardError: String) {
        guard let fd = errorPipe else { return (wait(), "") }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                bytes += chunk[0..<n]
                continue
            }
            if n < 0 && errno == EINTR { continue }
            break
        }
        close(fd)
        return (wait(), String(decoding: bytes, as: UTF8.self))
    }
}
