// ExtremeInputRoles: `threadkit child extreme CASE` feeds one public call an extreme value (Int.max,
// Int.min, Duration overflowing 64-bit seconds, deadlines far in the past or future, zero and
// negative counts) in a process of its own, so a trap in ThreadKit's arithmetic shows as a crash
// of that child only. Each case prints "ok CASE: what happened" and exits 0 when ThreadKit
// behaved (a result, a thrown TKError, or nothing); the misuse cases stop the process with a
// "ThreadKit misuse:" message instead. `threadkit child extreme list` prints the case names.
import Glibc
import ThreadKit

enum ExtremeInputRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "extreme", usage: "CASE|list (one public call with an extreme value; prints \"ok CASE: …\")") { args in
            guard let name = args.first else { return 2 }
            if name == "list" {
                for c in ExtremeCases.all { Console.out(c.name) }
                return 0
            }
            guard let c = ExtremeCases.all.first(where: { $0.name == name }) else {
                Console.err("no extreme case \(name)")
                return 2
            }
            let outcome = c.run()
            Console.out("ok \(name): \(outcome)")
            return 0
        },
    ]
}

/// The extreme values: beyond what Int64 seconds hold once added to now, and far in the past.
enum Extreme {
    static let huge = Duration.seconds(Int64.max)
    /// Twice `huge`: its seconds no longer fit in an Int64.
    static var farFuture: ContinuousClock.Instant { .now + huge + huge }
    static var farPast: ContinuousClock.Instant { .now - huge - huge }

    /// Runs `release` once thread `tid` of this process is asleep in the kernel (state S in
    /// /proc/self/task/TID/stat): a wait with an extreme deadline has then converted it.
    static func whenAsleep(_ tid: pid_t, _ release: @escaping @Sendable () -> Void) {
        TKThread.detachNewThread {
            while true {
                if let stat = readText("/proc/self/task/\(tid)/stat"), let close = stat.lastIndex(of: ")"),
                   stat[stat.index(after: close)...].dropFirst().first == "S" {
                    break
                }
                TKThread.sleep(for: .milliseconds(1))
            }
            release()
        }
    }

    /// The calling thread's kernel id ("PID/task/TID" is where /proc/thread-self points).
    static var currentTID: pid_t {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buffer, 63)
        let link = String(decoding: buffer.prefix(max(n, 0)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return pid_t(link.split(separator: "/").last ?? "") ?? getpid()
    }

    static func readText(_ path: String) -> String? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = read(fd, &buffer, buffer.count)
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }
}

struct ExtremeCase: Sendable {
    let name: String
    let run: @Sendable () -> String
}
