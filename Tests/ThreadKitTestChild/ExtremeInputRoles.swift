// ExtremeInputRoles: `ThreadKitTestChild extreme CASE` feeds one public call an extreme value (Int.max,
// Int.min, Duration overflowing 64-bit seconds, deadlines far in the past or future, zero and
// negative counts) in a process of its own, so a trap in ThreadKit's arithmetic shows as a crash
// of that child only. Each case prints "ok CASE: what happened" and exits 0 when ThreadKit
// behaved (a result, a thrown TKError, or nothing); `ThreadKitTestChild extreme list` prints the
// case names. (The one extreme input that is a misuse, a semaphore signalled past Int.max units,
// is an exit test: ExtremeInputTests.swift.)
import ChildProcessRoles
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
        ChildRole(name: "dispatch-io-offsets", usage: "(TKDispatchIO reads and writes at extreme offsets and lengths; one line per case)") {
            _ in
            DispatchIOOffsets.run()
        },
    ]
}

/// `ThreadKitTestChild dispatch-io-offsets`: each case makes a 20-byte file "0123456789abcdefghij",
/// puts its descriptor at `pos`, runs one read or write (data "XY") on a TKDispatchIO channel of
/// `type` at `off`, and prints
///   `case TYPE OP off=OFF len=LEN pos=POS => bytes=READ err=ERRNO left=UNWRITTEN position=P file=CONTENT`
/// (the bytes a read delivered, the operation's final errno, the bytes a write handed back, the
/// descriptor's position after the cleanup handler ran, the file's bytes). The test runs the
/// same cases on libdispatch's DispatchIO and compares the part after `=>`. Offsets past
/// Int64.max once added to the position used to trap in ThreadKit's sum.
enum DispatchIOOffsets {
    struct Case {
        let random: Bool, read: Bool, off: Int64, len: Int, pos: Int64
    }

    static let cases: [Case] = {
        let offsets: [Int64] = [.max - 5, .max, .min, .min + 5, -20, -10, 0, 5]
        var all: [Case] = []
        for random in [true, false] {
            for read in [true, false] {
                for off in offsets {
                    for len in read ? [4, Int.max] : [2] { all.append(Case(random: random, read: read, off: off, len: len, pos: 10)) }
                }
                // No overflow in the sum, the kernel refuses the position itself.
                all.append(Case(random: random, read: read, off: .max - 5, len: read ? 4 : 2, pos: 0))
            }
        }
        return all
    }()

    static func run() -> Int32 {
        var failed = false
        for c in cases {
            let line = "case \(c.random ? "random" : "stream") \(c.read ? "read" : "write") off=\(c.off) len=\(c.len) pos=\(c.pos)"
            guard let outcome = run(c) else {
                Console.out(line + " => TIMEOUT")
                failed = true
                continue
            }
            Console.out(line + " => " + outcome)
        }
        return failed ? 1 : 0
    }

    private final class Collected: @unchecked Sendable {
        // Written by handlers on one serial queue; read after `done` was signalled.
        var bytes: [UInt8] = []
        var error: Int32 = -1
        var left = 0
    }

    private static func run(_ c: Case) -> String? {
        var template = Array("/tmp/tk-io-offsets-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        guard fd >= 0 else { return "mkstemp failed: errno \(errno)" }
        unlink(template)
        defer { close(fd) }
        let content = Array("0123456789abcdefghij".utf8)
        _ = content.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        lseek(fd, off_t(c.pos), SEEK_SET)
        let queue = TKDispatchQueue(label: "io-offsets")
        let done = TKDispatchSemaphore(value: 0)
        let cleaned = TKDispatchSemaphore(value: 0)
        let io = TKDispatchIO(type: c.random ? .random : .stream, fileDescriptor: fd, queue: queue) { _ in cleaned.signal() }
        let collected = Collected()
        let handler: TKDispatchIO.IOHandler = { isDone, data, error in
            if let data { if c.read { collected.bytes += Array(data) } else { collected.left = data.count } }
            if isDone {
                collected.error = error
                done.signal()
            }
        }
        if c.read {
            io.read(offset: off_t(c.off), length: c.len, queue: queue, ioHandler: handler)
        } else {
            io.write(offset: off_t(c.off), data: TKDispatchData(copying: Array("XY".utf8)), queue: queue, ioHandler: handler)
        }
        guard done.wait(until: .now + .seconds(30)) == .success else { return nil }
        io.close()
        guard cleaned.wait(until: .now + .seconds(30)) == .success else { return nil }
        let position = lseek(fd, 0, SEEK_CUR)
        var file = [UInt8](repeating: 0, count: 64)
        let n = pread(fd, &file, file.count, 0)
        return "bytes=\(String(decoding: collected.bytes, as: UTF8.self)) err=\(collected.error) left=\(collected.left) "
            + "position=\(position) file=\(String(decoding: file.prefix(max(n, 0)), as: UTF8.self))"
    }
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
                    stat[stat.index(after: close)...].dropFirst().first == "S"
                {
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
