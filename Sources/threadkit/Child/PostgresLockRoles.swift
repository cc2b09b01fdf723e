// PostgresLockRoles: child processes contending for a TKPostgresLock, for ThreadKitPostgresTests,
// the tour and the benchmarks. Each prints what it did on standard output, one line per event.
import Glibc
import ThreadKit
import ThreadKitPostgres

enum PostgresLockRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "pglock-loop", usage: "URL NAME LOG N (N times: lock, append \"enter PID TOKEN\" and \"exit PID TOKEN\" to LOG, unlock)") { args in
            guard args.count == 4, let n = Int(args[3]) else { return 2 }
            do {
                let lock = try TKPostgresLock(name: args[1], url: args[0])
                let log = open(args[2], O_WRONLY | O_CREAT | O_APPEND, 0o644)
                guard log >= 0 else { return 2 }
                defer { close(log) }
                for _ in 0..<n {
                    guard try lock.lock(before: .now + .seconds(120)), let token = lock.fencingToken else {
                        Console.err("pglock-loop: no lock within 120 s"); return 1
                    }
                    appendLine(log, "enter \(getpid()) \(token)")
                    appendLine(log, "exit \(getpid()) \(token)")
                    try lock.unlock()
                }
                return 0
            } catch {
                Console.err("pglock-loop: \(error)")
                return 1
            }
        },
        ChildRole(name: "pglock-hold", usage: "URL NAME (lock, print \"locked TOKEN\", then hold it until killed)") { args in
            guard args.count == 2 else { return 2 }
            do {
                let lock = try TKPostgresLock(name: args[1], url: args[0])
                guard try lock.lock(before: .now + .seconds(120)), let token = lock.fencingToken else { return 1 }
                Console.out("locked \(token)")
                while true { TKThread.sleep(for: .seconds(3600)) }
            } catch {
                Console.err("pglock-hold: \(error)")
                return 1
            }
        },
    ]

    /// Appends one line with a single write(2) on an O_APPEND descriptor: lines from several
    /// processes never interleave.
    static func appendLine(_ fd: Int32, _ line: String) {
        var text = line + "\n"
        text.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
    }
}
