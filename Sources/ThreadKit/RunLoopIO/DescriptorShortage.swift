// DescriptorShortage: what a listening socket does when accept(2) fails because the process (or
// the system) is out of file descriptors, shared by TKSocketListener and TKSocketPort. The
// listening socket stays readable while connections wait, so retrying on readiness would spin a
// core: instead the listener stops watching it, leaves the connections in the kernel's backlog,
// says so once per process on standard error, and tries again from a one-shot timer on its loop.
//
// Threads: `AcceptOutcome(acceptingOn:)` on the accepting loop's thread; `warnOnce` from any
// thread (one atomic flag); the retry timer fires on the loop it was added to.
import CThreadKit
import Glibc
import Synchronization

/// One accept(2) on a listening socket, classified the way both listeners act on it.
enum AcceptOutcome: Equatable {
    /// A connected socket (non-blocking, close-on-exec), owned by the caller.
    case accepted(Int32)
    /// EAGAIN: no connection waits.
    case drained
    /// ECONNABORTED, EPROTO, EPERM: that connection is gone; the next one may be fine.
    case connectionGone
    /// EMFILE, ENFILE: stop watching and retry later (`DescriptorShortage`).
    case outOfDescriptors
    /// ENOBUFS, ENOMEM and anything else: try again on the next readiness report.
    case failed

    init(acceptingOn listenFD: Int32) {
        let fd = tk_accept(listenFD)
        if fd >= 0 {
            self = .accepted(fd)
            return
        }
        switch -fd {
        case EAGAIN: self = .drained
        case EMFILE, ENFILE: self = .outOfDescriptors
        case ECONNABORTED, EPROTO, EPERM: self = .connectionGone
        default: self = .failed
        }
    }
}

enum DescriptorShortage {
    /// How long a listener out of descriptors waits before it tries again.
    static let retryDelay: Duration = .milliseconds(100)
    /// Whether the line was printed, once per process. Relaxed: only the line is at stake.
    private static let warned = Atomic<Bool>(false)

    /// Prints, the first time in this process, that `listener` ran out of descriptors.
    static func warnOnce(_ listener: String) {
        guard !warned.exchange(true, ordering: .relaxed) else { return }
        var line =
            "ThreadKit: \(listener) is out of file descriptors (EMFILE/ENFILE); "
            + "connections wait in the backlog and accepting is retried every \(retryDelay). "
            + "Fix: close descriptors or raise RLIMIT_NOFILE.\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }

    /// A one-shot timer that calls `retry` after `retryDelay`; the caller adds it to its loop.
    static func retryTimer(_ retry: @escaping @Sendable () -> Void) -> TKTimer {
        TKTimer(fireAt: .now + retryDelay, interval: .zero, repeats: false) { _ in retry() }
    }
}
