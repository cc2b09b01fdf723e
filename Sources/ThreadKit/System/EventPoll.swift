// EventPoll: the sleeping and waking machinery of one run loop: an epoll set holding an eventfd
// (wakeUp), a timerfd (the next timer or run deadline) and, later, port descriptors. Owned by its
// run loop: `wait`, `arm` and the drains run on the loop's thread only; `wake` from any thread.
import CThreadKit
import Glibc
import Synchronization

final class EventPoll: @unchecked Sendable {
    static let wakeToken: UInt64 = 0
    static let timerToken: UInt64 = 1

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
        let (seconds, attoseconds) = delay.components
        let nanoseconds = attoseconds / 1_000_000_000
        _ = tk_timerfd_arm(timerFD, seconds, seconds == 0 && nanoseconds == 0 ? 1 : nanoseconds)
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
