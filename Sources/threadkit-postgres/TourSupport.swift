// TourSupport: what the PostgreSQL scenario needs of the `threadkit` tour's runner, trimmed to one
// scenario: the scenario and narrator types, the verdict's failure, unbuffered console lines,
// polling until a deadline, a shared box, and a launcher for this executable's hidden child
// (`/proc/self/exe tour --child ROLE ...`). Sources/threadkit's Tour.swift and Support/ hold the
// originals; they are a few lines each and this executable must not link the tour (nor the tour
// PostgresNIO). Main thread only, except Console and SharedBox (any thread).
import Glibc

struct Scenario: Sendable {
    let name: String
    let title: String
    /// The seed document passage it reproduces.
    let source: String
    /// Runs the scenario, narrating through `Narrator`; returns the verdict's detail on success
    /// and throws `ScenarioFailure` on failure.
    let run: @Sendable (Narrator) throws -> String
}

struct ScenarioFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Prints narration lines, indented under the scenario's heading.
final class Narrator: Sendable {
    func say(_ line: String) { Console.out("  \(line)") }

    func check(_ condition: Bool, _ failure: @autoclosure () -> String) throws {
        if !condition { throw ScenarioFailure(failure()) }
    }
}

/// Unbuffered writes to standard output and error, so that lines written by several threads and
/// processes appear in the order they were written. Any thread.
enum Console {
    static func out(_ line: String) { write(1, line + "\n") }
    static func err(_ line: String) { write(2, line + "\n") }

    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }
}

/// Polls `condition` every millisecond until it holds (true) or `deadline` passes (false).
func pollUntil(_ deadline: ContinuousClock.Instant, _ condition: () -> Bool) -> Bool {
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        usleep(1_000)
    }
    return true
}

/// A mutable value shared between the scenario's threads. It does no locking of its own: every
/// use states what orders it.
final class SharedBox<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// This executable started again as `threadkit-postgres tour --child role arguments…`, with the
/// same standard streams and environment. The launching thread owns it and waits for it.
struct ChildLauncher {
    let pid: pid_t

    init(_ role: String, _ arguments: [String]) throws {
        let argv = ["threadkit-postgres", "tour", "--child", role] + arguments
        // safety: every strdup'd string is freed after posix_spawn, which copies them.
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
