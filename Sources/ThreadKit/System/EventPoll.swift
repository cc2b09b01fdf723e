// EventPoll: the sleeping and waking machinery of one run loop: an epoll set holding an eventfd
// (wakeUp), a timerfd (the next timer or run deadline) and the descriptors of socket ports.
// Owned by its run loop: `wait`, `arm` and the drains run on the loop's thread only; `wake`,
// `watch` and `unwatch` from any thread (`watchers` is guarded by its own leaf lock).
import CThreadKit
import Glibc
import Synchronization

/// A descriptor's owner, told on the loop's thread when the descriptor is ready.
protocol DescriptorWatcher: AnyObject, Sendable {
    /// `events` are epoll's bits (EPOLLIN 0x1, EPOLLOUT 0x4, EPOLLERR 0x8, EPOLLHUP 0x10).
    func descriptorReady(_ fd: Int32, events: UInt32)
}

/// An errno from epoll_ctl.
struct EpollError: Error {
    let code: Int32
}

final class EventPoll: @unchecked Sendable {
    static let wakeToken: UInt64 = 0
    static let timerToken: UInt64 = 1

    /// Watched descriptors by token (tokens from 2 up, never reused, so an event for a descriptor
    /// unwatched meanwhile finds no entry and is ignored). Guarded by its lock.
    private struct Watch {
        let fd: Int32
        weak var watcher: (any DescriptorWatcher)?
    }
    private let watchers = Protected<(next: UInt64, byToken: [UInt64: Watch])>((2, [:]))

    private let epoll: Int32
    private let wakeFD: Int32
    private let timerFD: Int32
    /// How many wake-up writes were made (for tests of coalescing). Relaxed: a statistic.
    let wakeWrites = Atomic<Int>(0)
    /// Ready tokens of the last `wait`; loop thread only.
    private var tokens = [UInt64](repeating: 0, count: 64)
    private var events = [UInt32](repeating: 0, count: 64)

    init() {
        epoll = tk_epoll_create()
        wakeFD = tk_eventfd()
        timerFD = tk_timerfd()
        guard epoll >= 0, wakeFD >= 0, timerFD >= 0,
              tk_epoll_ctl(epoll, 1, wakeFD, 1, EventPoll.wakeToken) == 0,
              tk_epoll_ctl(epoll, 1, timerFD, 1, EventPoll.timerToken) == 0 else {
            // Out of file descriptors: a run loop cannot exist without them.
            fatalError("ThreadKit: cannot create a run loop's epoll/eventfd/timerfd: \(SystemCall.errorName(errno))")
        }
    }

    deinit {
        close(timerFD)
        close(wakeFD)
        close(epoll)
    }

    /// Makes the next (or current) `wait` return. Any thread.
    func wake() {
        wakeWrites.wrappingAdd(1, ordering: .relaxed)
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Arms the timerfd to fire after `delay` (at least 1 ns); nil disarms it.
    func arm(after delay: Duration?) {
        EventPoll.arm(timerFD, after: delay)
    }

    /// Arms the timerfd `fd` to fire once after `delay`; nil disarms it. Shared with the dispatch
    /// manager's timerfd.
    static func arm(_ fd: Int32, after delay: Duration?) {
        guard let delay else {
            _ = tk_timerfd_arm(fd, 0, 0)
            return
        }
        // A deadline already past (a negative delay) must still fire: arm for 1 ns, since an
        // all-zero value would disarm the timer and the loop would sleep forever.
        guard delay > .zero else {
            _ = tk_timerfd_arm(fd, 0, 1)
            return
        }
        let (seconds, nanoseconds) = delay.kernelTimespec
        _ = tk_timerfd_arm(fd, seconds, seconds == 0 && nanoseconds == 0 ? 1 : nanoseconds)
    }

    /// Adds `fd` to the set (level-triggered, for `events`); its watcher is called on the loop's
    /// thread while it is ready. Returns the token for `modify`/`unwatch`, nil if epoll refused.
    func watch(_ fd: Int32, events: UInt32, watcher: any DescriptorWatcher) -> UInt64? {
        try? watchOrFail(fd, events: events, watcher: watcher).get()
    }

    /// `watch`, with epoll's errno when it refuses (EBADF: not open; EPERM: a regular file;
    /// EEXIST: already in this set).
    func watchOrFail(_ fd: Int32, events: UInt32, watcher: any DescriptorWatcher) -> Result<UInt64, EpollError> {
        let token = watchers.withLock { w -> UInt64 in
            defer { w.next += 1 }
            w.byToken[w.next] = Watch(fd: fd, watcher: watcher)
            return w.next
        }
        guard tk_epoll_ctl(epoll, 1 /* EPOLL_CTL_ADD */, fd, events, token) == 0 else {
            let error = errno   // before the lock, whose slow path may make syscalls
            _ = watchers.withLock { $0.byToken.removeValue(forKey: token) }
            return .failure(EpollError(code: error))
        }
        return .success(token)
    }

    /// Changes the events a watched descriptor is waited for (0: none, it stays registered).
    /// Returns 0, or epoll's errno (EBADF / ENOENT: the descriptor was closed under its watcher).
    @discardableResult
    func modify(_ token: UInt64, events: UInt32) -> Int32 {
        guard let fd = watchers.withLock({ $0.byToken[token]?.fd }) else { return ENOENT }
        return tk_epoll_ctl(epoll, 3 /* EPOLL_CTL_MOD */, fd, events, token) == 0 ? 0 : errno
    }

    /// Removes a watched descriptor. Call before closing it.
    func unwatch(_ token: UInt64) {
        guard let entry = watchers.withLock({ $0.byToken.removeValue(forKey: token) }) else { return }
        _ = tk_epoll_ctl(epoll, 2 /* EPOLL_CTL_DEL */, entry.fd, 0, 0)
    }

    /// The watcher and descriptor of a token, nil once unwatched.
    func watcher(for token: UInt64) -> (any DescriptorWatcher, Int32)? {
        watchers.withLock { w in w.byToken[token].flatMap { entry in entry.watcher.map { ($0, entry.fd) } } }
    }

    /// Sleeps until something is ready (`block`) or only polls, then calls `ready` per token.
    /// The wake eventfd and the timerfd are drained here.
    func wait(block: Bool, _ ready: (UInt64, UInt32) -> Void) {
        var n: Int32
        repeat {
            n = tokens.withUnsafeMutableBufferPointer { t in
                events.withUnsafeMutableBufferPointer { e in
                    tk_epoll_wait(epoll, t.baseAddress, e.baseAddress, 64, block ? -1 : 0)
                }
            }
        } while n < 0 && errno == EINTR
        for i in 0..<Int(max(n, 0)) {
            var drained: UInt64 = 0
            switch tokens[i] {
            case EventPoll.wakeToken: _ = read(wakeFD, &drained, 8)
            case EventPoll.timerToken: _ = read(timerFD, &drained, 8)
            default: break
            }
            ready(tokens[i], events[i])
        }
    }
}
