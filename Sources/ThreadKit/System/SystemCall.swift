// SystemCall: the one thin layer every syscall of ThreadKit goes through (futex, clocks, and the
// file calls of TKDistributedLock), so errno handling lives in one place and tests can see it.
// Callable from any thread. Its only state is two process-wide counters of futex calls (waits,
// wakes; read through TKPoolIntrospection by the benchmarks): each wrapper adds one with a relaxed
// atomic add next to its syscall, which costs a few nanoseconds beside the syscall's hundreds and
// orders nothing.
import CThreadKit
import Glibc
import Synchronization

@usableFromInline
package enum SystemCall {
    /// The result of a futex wait, each errno of FUTEX_WAIT named.
    enum FutexWaitResult {
        case woken // 0: woken by FUTEX_WAKE, or spuriously: callers re-check their word
        case valueChanged // EAGAIN: the word did not hold the expected value
        case timedOut // ETIMEDOUT: the relative timeout passed
        case interrupted // EINTR: a signal handler ran
    }

    /// FUTEX_WAIT calls made through `futexWait` since the process started (any thread, relaxed:
    /// a count, not a synchronization point).
    static let futexWaitCalls = Atomic<Int>(0)
    /// FUTEX_WAKE calls made through `futexWake` since the process started (any thread, relaxed).
    static let futexWakeCalls = Atomic<Int>(0)

    /// Blocks while `*word == expected`, at most `timeout` (nil: no limit).
    static func futexWait(_ word: UnsafeMutablePointer<UInt32>, expected: UInt32, timeout: Duration?) -> FutexWaitResult {
        futexWaitCalls.wrappingAdd(1, ordering: .relaxed)
        let r: Int32
        if let timeout {
            let (seconds, nanoseconds) = timeout.kernelTimespec
            var ts = timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds))
            r = tk_futex_wait(word, expected, &ts)
        } else {
            r = tk_futex_wait(word, expected, nil)
        }
        switch r {
        case 0: return .woken
        case -EAGAIN: return .valueChanged
        case -ETIMEDOUT: return .timedOut
        case -EINTR: return .interrupted
        default:
            // EFAULT/EINVAL/ENOSYS mean a corrupted word address or a kernel without futex:
            // there is no way to keep the blocking promise.
            fatalError("ThreadKit: futex wait failed with errno \(-r) (\(errorName(-r))) on word \(word)")
        }
    }

    /// Wakes up to `count` waiters of `word`; returns how many woke.
    @discardableResult
    static func futexWake(_ word: UnsafeMutablePointer<UInt32>, count: Int32) -> Int32 {
        futexWakeCalls.wrappingAdd(1, ordering: .relaxed)
        let r = tk_futex_wake(word, count)
        if r < 0 { fatalError("ThreadKit: futex wake failed with errno \(-r) (\(errorName(-r))) on word \(word)") }
        return r
    }

    /// prctl(PR_SET_TIMERSLACK) for the calling thread.
    static func setTimerSlack(nanoseconds: UInt) {
        _ = tk_set_timer_slack(nanoseconds)
    }

    static func errorName(_ code: Int32) -> String {
        guard let s = strerror(code) else { return "errno \(code)" }
        return String(cString: s)
    }

    /// The errno's symbol and description, "EAGAIN (Resource temporarily unavailable)", for the
    /// errors ThreadKit's messages name; others as "errno N (description)".
    static func errnoName(_ code: Int32) -> String {
        let symbols: [Int32: String] = [
            EAGAIN: "EAGAIN", ENOMEM: "ENOMEM", EINVAL: "EINVAL", EPERM: "EPERM",
            EACCES: "EACCES", EROFS: "EROFS", ENOENT: "ENOENT", EEXIST: "EEXIST",
            ELOOP: "ELOOP", EMFILE: "EMFILE", ENFILE: "ENFILE", EBADF: "EBADF",
            ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR",
        ]
        return "\(symbols[code] ?? "errno \(code)") (\(errorName(code)))"
    }

    /// Writes one line to standard error in one write(2), so lines from several threads do not
    /// interleave (ThreadKit's and ThreadKitMetrics' reports of trouble they work around).
    package static func report(_ line: String) {
        var text = line + "\n"
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }

    /// The calling thread's kernel thread id (cached per thread; never 0).
    @inlinable @inline(__always) static var currentThreadID: UInt32 { tk_current_tid() }
}
