// DistributedLockRoles: child processes contending for a TKDistributedLock, for the tests. Each
// prints what it did on standard output, one line per event. dlock-hold, which the tour also
// runs, is in Sources/ChildProcessRoles (SharedChildRoles).
import ChildProcessRoles
import Glibc
import ThreadKit

enum DistributedLockRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "dlock-break-race",
            usage: "PATH GO DONE (when GO exists: breakLockIfHolderIsDead, tryLock, report; stay alive until DONE exists)"
        ) { args in
            guard args.count == 3, let lock = try? TKDistributedLock(path: args[0]) else { return 2 }
            while access(args[1], F_OK) != 0 { TKThread.sleep(for: .microseconds(200)) }
            do {
                let broke = try lock.breakLockIfHolderIsDead()
                let acquired = lock.tryLock()
                Console.out("broke=\(broke) acquired=\(acquired)")
                // A winner that exited at once would leave a stale lock for the next racer.
                while access(args[2], F_OK) != 0 { TKThread.sleep(for: .milliseconds(1)) }
                return 0
            } catch {
                Console.err("\(error)")
                return 1
            }
        },
        ChildRole(name: "dlock-loop", usage: "PATH LOG N (N times: take the lock, log enter/exit, release)") { args in
            guard args.count == 3, let n = Int(args[2]), let lock = try? TKDistributedLock(path: args[0]) else { return 2 }
            guard let log = AppendLog(path: args[1]) else { return 2 }
            for _ in 0..<n {
                var backoff = 1
                while !lock.tryLock() {
                    TKThread.sleep(for: .microseconds(backoff * 50))
                    backoff = min(backoff * 2, 20)
                }
                log.append("enter \(getpid())")
                log.append("exit \(getpid())")
                do { try lock.unlock() } catch {
                    Console.err("\(error)")
                    return 1
                }
            }
            return 0
        },
    ]
}

/// Child processes for the distributed lock shared with another user (issue 15, items 9–11).
enum DistributedLockUserRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "dlock-check", usage: "PATH [nobody] (print the holder's liveness and try breakLockIfHolderIsDead, as nobody if asked)"
        ) { args in
            if args.count > 1 && args[1] == "nobody" && !becomeNobody() { return 3 }
            guard let lock = try? TKDistributedLock(path: args[0]) else { return 2 }
            let holder = lock.holder
            Console.out("dead=\(holder?.isDefinitelyDead.description ?? "none") verdict=\(holder?.verdict ?? "")")
            do { Console.out("broke=\(try lock.breakLockIfHolderIsDead())") } catch { Console.out("threw \(error)") }
            return 0
        },
        ChildRole(name: "dlock-readonly", usage: "PATH (as nobody: tryLock, lastError, tryLockOrThrow in a directory nobody may not write)")
        { args in
            guard becomeNobody(), let lock = try? TKDistributedLock(path: args[0]) else { return 3 }
            Console.out(
                "tryLock=\(lock.tryLock()) holder=\(lock.holder.map { "\($0.pid)" } ?? "nil") lastError=\(lock.lastError.map { "\($0)" } ?? "nil")"
            )
            do { Console.out("tryLockOrThrow=\(try lock.tryLockOrThrow())") } catch { Console.out("threw \(error)") }
            return 0
        },
    ]

    /// Drops root for user and group nobody (65534); true if the process now runs as nobody.
    static func becomeNobody() -> Bool {
        if geteuid() == 0 { guard setgroups(0, nil) == 0, setgid(65534) == 0, setuid(65534) == 0 else { return false } }
        return geteuid() == 65534
    }
}
