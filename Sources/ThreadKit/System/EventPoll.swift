// EventPoll: the one epoll wrapper: an epoll set holding an eventfd (wakeUp), a timerfd (the next
// deadline) and the descriptors its owner watches. Each run loop owns one (socket ports, run-loop
// I/O); the dispatch manager owns one (Dispatch/Manager/). `wait`, `arm` and the drains run on the
// owner's thread only; `wake`, `watch`, `modify` and `unwatch` from any thread (`watchers` is
// guarded by its own leaf lock, held across their epoll_ctl calls; nothing else is taken under it).
// `add`, `change` and `remove` (registrations keyed by the owner's own data word) take no lock:
// their owner serializes them under its own (the dispatch manager's lock).
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

// safety: the watcher table is a `Protected`; `tokens` and `events` are the polling thread's
// only; the descriptors are immutable; the rest is atomic.
final class EventPoll: @unchecked Sendable {
    static let wakeToken: UInt64 = 0
    static let timerToken: UInt64 = 1

    // epoll's event bits (<sys/epoll.h>): what `watch`/`add` wait for and what `wait` reports.
    static let pollIn: UInt32 = 0x001
    static let pollPri: UInt32 = 0x002
    static let pollOut: UInt32 = 0x004
    static let pollErr: UInt32 = 0x008
    static let pollHup: UInt32 = 0x010
    /// Reported once, then disarmed until the next `modify`/`change`.
    static let pollOneShot: UInt32 = 1 << 30

    /// Watched descriptors by token (tokens from 2 up, never reused, so an event for a descriptor
    /// unwatched meanwhile finds no entry and is ignored), and which token owns each descriptor
    /// number in this set now. Guarded by its lock, which is also held across every epoll_ctl, so
    /// an ownership check and the system call it allows cannot be separated by another watch.
    ///
    /// Why owners: epoll keys an entry by (open file, descriptor number), and epoll_ctl names it
    /// by number. A descriptor closed under its watcher (without `unwatch`) leaves the number
    /// free; when another object reuses it and watches it here, a MOD or DEL by the old token
    /// would land on the new object's entry (stealing its events, or deleting its registration).
    /// So a successful ADD of a number owned by another token makes that token *superseded*:
    /// its `modify` answers `EventPoll.superseded` and touches nothing, its `unwatch` only forgets
    /// it, and its events are ignored. (Where the old file is still open through a `dup`, the
    /// kernel keeps its entry, now unreachable by number; one-shot watchers hear from it at most
    /// once more, and the superseded token makes that event a no-op.)
    private struct Watch {
        let fd: Int32
        weak var watcher: (any DescriptorWatcher)?
    }
    private struct Table {
        var next: UInt64 = 2
        var byToken: [UInt64: Watch] = [:]
        var owner: [Int32: UInt64] = [:]

        /// The entry of `token` if it still owns its descriptor number.
        func current(_ token: UInt64) -> Watch? {
            guard let entry = byToken[token], owner[entry.fd] == token else { return nil }
            return entry
        }
    }
    private let watchers = Protected(Table())

    /// `modify`'s answer for a superseded token: its descriptor number now belongs to another
    /// watcher in this set (the descriptor was closed under the old one and the number reused).
    /// Not an errno (those are positive).
    static let superseded: Int32 = -1

    private let epoll: Int32
    /// The epoll set itself, for a host event loop to poll (TKRunLoop+Embedding): readable while any
    /// descriptor in the set is ready. Never closed before the loop is released.
    var descriptor: Int32 { epoll }
    private let wakeFD: Int32
    /// The wake eventfd, for a writer that cannot call `wake` (the dispatch manager's signal
    /// handler, async-signal-safe: `tk_signal_set_wake_fd`). Its write makes `wait` report
    /// `wakeToken`; it leaves `wakePending` alone.
    var wakeDescriptor: Int32 { wakeFD }
    private let timerFD: Int32
    /// How many wake-up writes were made (for tests of coalescing). Relaxed: a statistic.
    let wakeWrites = Atomic<Int>(0)
    /// Ready tokens of the last `wait`; loop thread only.
    private var tokens = [UInt64](repeating: 0, count: 64)
    private var events = [UInt32](repeating: 0, count: 64)

    /// `owner` names it in the message when the descriptors cannot be made.
    init(owner: String = "a run loop") {
        epoll = tk_epoll_create()
        wakeFD = tk_eventfd()
        timerFD = tk_timerfd()
        guard epoll >= 0, wakeFD >= 0, timerFD >= 0,
            tk_epoll_ctl(epoll, 1, wakeFD, 1, EventPoll.wakeToken) == 0,
            tk_epoll_ctl(epoll, 1, timerFD, 1, EventPoll.timerToken) == 0
        else {
            // Out of file descriptors: neither a run loop nor the dispatch manager can exist
            // without them.
            fatalError("ThreadKit: cannot create \(owner)'s epoll/eventfd/timerfd: \(SystemCall.errorName(errno))")
        }
    }

    deinit {
        close(timerFD)
        close(wakeFD)
        close(epoll)
    }

    /// True while a wake-up write is outstanding: coalesces many `wakeCoalesced()` calls into one
    /// write. Cleared by the loop thread after it drains the eventfd (sequentially consistent: see
    /// `wakeCoalesced`). Here rather than in the TKRunLoop so that a thread holding only this object
    /// can wake the loop: an executor's `enqueue` may find the loop gone once its job is queued
    /// (TKRunLoop+Executor `submit`).
    let wakePending = Atomic<Bool>(false)

    /// Wakes the loop if it sleeps (or makes its next sleep return at once); while a wake-up is
    /// outstanding, writes nothing. Sequentially consistent exchange: pairs with the loop's clear
    /// of `wakePending` before it looks at its queues again. Any thread.
    func wakeCoalesced() {
        // The plain load skips the read-modify-write while a wake-up is already outstanding.
        if wakePending.load(ordering: .sequentiallyConsistent) { return }
        if !wakePending.exchange(true, ordering: .sequentiallyConsistent) { wake() }
    }

    /// Makes the next (or current) `wait` return. Any thread.
    func wake() {
        wakeWrites.wrappingAdd(1, ordering: .relaxed)
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Arms the timerfd to fire once after `delay` (at least 1 ns); nil disarms it.
    func arm(after delay: Duration?) {
        guard let delay else {
            _ = tk_timerfd_arm(timerFD, 0, 0)
            return
        }
        // A deadline already past (a negative delay) must still fire: arm for 1 ns, since an
        // all-zero value would disarm the timer and the loop would sleep forever.
        guard delay > .zero else {
            _ = tk_timerfd_arm(timerFD, 0, 1)
            return
        }
        let (seconds, nanoseconds) = delay.kernelTimespec
        _ = tk_timerfd_arm(timerFD, seconds, seconds == 0 && nanoseconds == 0 ? 1 : nanoseconds)
    }

    /// Adds `fd` to the set (level-triggered, for `events`); its watcher is called on the loop's
    /// thread while it is ready. Returns the token for `modify`/`unwatch`, nil if epoll refused.
    func watch(_ fd: Int32, events: UInt32, watcher: any DescriptorWatcher) -> UInt64? {
        try? watchOrFail(fd, events: events, watcher: watcher).get()
    }

    /// `watch`, with epoll's errno when it refuses (EBADF: not open; EPERM: a regular file;
    /// EEXIST: this open file is already in this set under that number). A success takes the
    /// number over from a token that still claimed it (see `Table`).
    func watchOrFail(_ fd: Int32, events: UInt32, watcher: any DescriptorWatcher) -> Result<UInt64, EpollError> {
        watchers.withLock { w -> Result<UInt64, EpollError> in
            let token = w.next
            guard tk_epoll_ctl(epoll, 1 /* EPOLL_CTL_ADD */, fd, events, token) == 0 else {
                return .failure(EpollError(code: errno))
            }
            w.next += 1
            w.byToken[token] = Watch(fd: fd, watcher: watcher)
            w.owner[fd] = token // a previous owner of the number is superseded
            return .success(token)
        }
    }

    /// Changes the events a watched descriptor is waited for (0: none, it stays registered).
    /// Returns 0, epoll's errno (EBADF / ENOENT: the descriptor was closed under its watcher), or
    /// `EventPoll.superseded` (closed under it and the number watched here by someone else since:
    /// nothing is touched).
    @discardableResult
    func modify(_ token: UInt64, events: UInt32) -> Int32 {
        watchers.withLock { w -> Int32 in
            guard let entry = w.byToken[token] else { return ENOENT }
            guard w.owner[entry.fd] == token else { return EventPoll.superseded }
            return tk_epoll_ctl(epoll, 3 /* EPOLL_CTL_MOD */, entry.fd, events, token) == 0 ? 0 : errno
        }
    }

    /// Removes a watched descriptor. Call before closing it. A superseded token is only
    /// forgotten: the number's entry belongs to its new owner.
    func unwatch(_ token: UInt64) {
        watchers.withLock { w in
            guard let entry = w.byToken.removeValue(forKey: token), w.owner[entry.fd] == token else { return }
            w.owner.removeValue(forKey: entry.fd)
            _ = tk_epoll_ctl(epoll, 2 /* EPOLL_CTL_DEL */, entry.fd, 0, 0)
        }
    }

    /// The watcher and descriptor of a token, nil once unwatched or superseded.
    func watcher(for token: UInt64) -> (any DescriptorWatcher, Int32)? {
        watchers.withLock { w in w.current(token).flatMap { entry in entry.watcher.map { ($0, entry.fd) } } }
    }

    // MARK: Registrations keyed by the owner's data word

    // For an owner that keeps its own table of what it watches, keyed by a data word it chooses,
    // and serializes these calls under its own lock (the dispatch manager: descriptors by number,
    // owned descriptors by number and generation). `wait` reports `data` as the token, as is. Such
    // a set uses only these three, never `watch`, and its data words avoid `wakeToken` and
    // `timerToken`. They take no lock here, so they stay one system call each.

    /// EPOLL_CTL_ADD of `fd` for `events` (with `pollOneShot` or level-triggered). Returns 0 or
    /// epoll's errno (EPERM: a regular file or a directory; EBADF: not open). Any thread.
    @discardableResult
    func add(_ fd: Int32, events: UInt32, data: UInt64) -> Int32 {
        tk_epoll_ctl(epoll, 1 /* EPOLL_CTL_ADD */, fd, events, data) == 0 ? 0 : errno
    }

    /// EPOLL_CTL_MOD: waits for `events` with `data` from now on (re-arms a one-shot). Returns 0
    /// or epoll's errno. Any thread.
    @discardableResult
    func change(_ fd: Int32, events: UInt32, data: UInt64) -> Int32 {
        tk_epoll_ctl(epoll, 3 /* EPOLL_CTL_MOD */, fd, events, data) == 0 ? 0 : errno
    }

    /// EPOLL_CTL_DEL. Call before closing `fd`. Returns 0 or epoll's errno. Any thread.
    @discardableResult
    func remove(_ fd: Int32) -> Int32 {
        tk_epoll_ctl(epoll, 2 /* EPOLL_CTL_DEL */, fd, 0, 0) == 0 ? 0 : errno
    }

    /// Sleeps until something is ready (`block`) or only polls, then calls `ready` per token.
    /// The wake eventfd and the timerfd are drained here.
    func wait(block: Bool, _ ready: (UInt64, UInt32) -> Void) {
        var n: Int32
        repeat {
            // safety: both arrays hold 64 elements and stay alive and unmoved for the call; the
            // kernel writes at most 64 (the count passed).
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
