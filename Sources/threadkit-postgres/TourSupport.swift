// TourSupport: what the PostgreSQL scenario needs of the `threadkit` tour's runner, trimmed to one
// scenario: the scenario and narrator types, the verdict's failure, and a launcher for this
// executable's hidden child (`/proc/self/exe tour --child ROLE ...`). Sources/threadkit's Tour.swift
// and Support/ChildLauncher.swift hold the full versions (this executable must not link the tour,
// nor the tour PostgresNIO); Console, pollUntil and SharedBox come from Sources/ChildProcessRoles.
// Main thread only.
#if Postgres
    import ChildProcessRoles
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
#endif
