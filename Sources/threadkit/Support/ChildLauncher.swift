// ChildLauncher: starts this same executable (`/proc/self/exe child ROLE ...`) as a child
// process for the tour's multi-process scenarios, and waits for it. Called from the tour's thread.
import Glibc

struct ChildLauncher {
    let pid: pid_t

    /// Starts `threadkit child role arguments…` with the tour's standard streams.
    init(_ role: String, _ arguments: [String]) throws {
        let argv = ["threadkit", "child", role] + arguments
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        let r = posix_spawn(&pid, "/proc/self/exe", nil, nil, &cArgs, environ)
        guard r == 0 else { throw ScenarioFailure("posix_spawn failed: \(String(cString: strerror(r)))") }
        self.pid = pid
    }

    /// Waits for the child and returns its exit status (128 + signal when killed).
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }
}
