// IOLoopThread: a Foundation thread that runs its TKRunLoop's default mode until stopped, for the
// run-loop I/O and task-executor tests; plus /proc and getrusage probes (descriptors open, CPU time
// used) that are independent of the code under test.
import Foundation
import Glibc
import Synchronization
import ThreadKit
import XCTest

final class IOLoopThread: @unchecked Sendable {
    /// Set once by the thread before `init` returns; read-only afterwards.
    private(set) var loop: TKRunLoop!
    /// The thread's pthread, to check that callbacks run on it (the judge of "ran on the loop's
    /// thread"). Set once by the thread before `init` returns.
    private(set) var pthread = pthread_t()
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchGroup()

    /// `passDeadline`: each run of the loop ends after this long (a missed wake-up shows as
    /// lateness); nil: the loop runs with no deadline (`run()`), so only a wake-up ends a sleep and
    /// work queued without one is seen stuck, not late.
    init(name: String = "io-loop", passDeadline: Duration? = .seconds(1)) {
        let ready = DispatchSemaphore(value: 0)
        finished.enter()
        let thread = Thread { [self] in
            loop = TKRunLoop.current
            pthread = pthread_self()
            // Something in the default mode, so runs do not return .finished at once.
            let keepAlive = TKRunLoopSource(perform: {})
            loop.add(keepAlive, forMode: .default)
            ready.signal()
            while !stopping.load(ordering: .acquiring) {
                if let passDeadline { loop.run(mode: .default, before: .now + passDeadline) } else { loop.run() }
            }
            keepAlive.invalidate()
            finished.leave()
        }
        thread.name = name
        thread.start()
        ready.wait()
    }

    /// Whether the caller is this loop's thread.
    var isCurrent: Bool { pthread_equal(pthread, pthread_self()) != 0 }

    /// Runs `body` on the loop's thread and waits for it (at most 30 s).
    func sync<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        let result = Guarded<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        loop.perform {
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "loop thread did not run the block")
        return result.withLock { $0! }
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        // A block stops the run that executes it (stop() from here could land between runs).
        loop.perform { TKRunLoop.current.stop() }
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success, "loop thread did not stop")
    }
}

enum ProcessProbe {
    /// How many descriptors this process has open.
    static var openDescriptors: Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? 1) - 1
    }

    /// How many IPv4/IPv6 sockets this process has open (Foundation's Process keeps Unix
    /// socketpairs and a run loop of its own, which are not ours to count).
    static var openSockets: Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.compactMap { Int32($0) }.filter { fd in
            var domain: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 else { return false }
            return domain == AF_INET || domain == AF_INET6
        }.count
    }

    /// Waits (at most 10 s) until the open descriptor count is at most `limit`; returns the count.
    static func descriptors(settlingAtMost limit: Int) -> Int {
        var count = openDescriptors
        _ = waitUntil(.now + .seconds(10)) {
            count = openDescriptors
            return count <= limit
        }
        return count
    }

    /// User + system CPU time of the whole process.
    static var cpuTime: Duration {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let micros =
            (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000
            + Int(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
        return .microseconds(micros)
    }

    /// Resident memory of this process in kB (VmRSS of /proc/self/status).
    static var residentKB: Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Whether `fd` is open.
    static func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) != -1 }
}

/// Records values from callbacks under a pthread mutex, with a wait for a condition.
final class Recorder<Value: Sendable>: @unchecked Sendable {
    private let guarded = Guarded<[Value]>([])
    func append(_ value: Value) { guarded.withLock { $0.append(value) } }
    var values: [Value] { guarded.withLock { $0 } }
    var count: Int { guarded.withLock { $0.count } }

    /// Waits until `condition(values)` holds, at most `seconds`.
    @discardableResult
    func wait(seconds: Int = 20, until condition: ([Value]) -> Bool) -> Bool {
        waitUntil(.now + .seconds(seconds)) { condition(values) }
    }
}

/// Descriptors for the I/O tests, made with plain POSIX calls.
enum IOTestFD {
    static func pipe() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(Glibc.pipe(&fds), 0)
        for fd in fds {
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return (fds[0], fds[1])
    }

    static func socketPair() -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds), 0)
        return (fds[0], fds[1])
    }

    static func writeByte(_ fd: Int32) {
        var byte: UInt8 = 7
        XCTAssertEqual(write(fd, &byte, 1), 1)
    }
}
