// DescriptorRegistration: one descriptor in one run loop's epoll set, armed one shot at a time
// (EPOLLONESHOT), for the run-loop I/O objects (docs/RunLoopIO.md). The kernel disarms it when it
// reports, so a descriptor that stays ready is never reported twice without a re-arm: nothing can
// spin.
//
// Threads: `arm` and `cancel` from any thread, always under the owner's lock (which also guards
// `armed` and `token`); the owner is told of readiness on the loop's thread.
import Glibc

/// The owner of registrations: told on the loop's thread, in any mode, that a descriptor is ready.
protocol ReadinessHandler: AnyObject, Sendable {
    func descriptorReady(_ registration: DescriptorRegistration, events: UInt32)
}

/// epoll's bits, named (Swift's Glibc module does not export them as UInt32).
enum EpollBits {
    static let input: UInt32 = 0x001
    static let output: UInt32 = 0x004
    static let error: UInt32 = 0x008
    static let hangUp: UInt32 = 0x010
    static let readHangUp: UInt32 = 0x2000
    static let oneShot: UInt32 = 0x4000_0000
    /// What the reading side waits for; EPOLLERR and EPOLLHUP are always reported by the kernel.
    static let readInterest: UInt32 = input | readHangUp
    static let writeInterest: UInt32 = output
    /// Reported for any interest: both sides must look (a read or write then shows the error/end).
    static let failure: UInt32 = error | hangUp
}

// safety: `token` and `armed` are touched only under the owner's lock; the weak references
// load safely from any thread; `fd` is immutable.
final class DescriptorRegistration: DescriptorWatcher, @unchecked Sendable {
    let fd: Int32
    /// The loop's poll. Weak: a loop whose thread ended closes its epoll set, and a registration
    /// kept by a living owner must not keep the set (three descriptors) open.
    private weak var poll: EventPoll?
    /// The loop, for misuse messages only (weak, as `poll`).
    private weak var loop: TKRunLoop?
    private weak var handler: (any ReadinessHandler)?
    /// The epoll token once added (nil before the first arm). Guarded by the owner's lock.
    private var token: UInt64?
    /// The interest the kernel holds armed now (0: disarmed, or never added). Guarded by the
    /// owner's lock; set to 0 by `disarmed()` when the kernel has reported (one shot).
    private(set) var armed: UInt32 = 0

    init(fd: Int32, loop: TKRunLoop, handler: any ReadinessHandler) {
        self.fd = fd
        poll = loop.poll
        self.loop = loop
        self.handler = handler
    }

    /// The loop's owning thread as misuse messages name it.
    var loopDescription: String { loop?.ownerDescription ?? "a finished thread" }

    /// Arms the registration for `interest` (EpollBits); 0 leaves it as it is (a disarmed
    /// registration stays quiet; an armed one reports at most once more, which the owner ignores).
    /// Returns 0 or epoll's errno: EBADF/ENOENT (the descriptor was closed under its owner),
    /// EPERM (a regular file: always ready), EEXIST (already in this set); or
    /// `EventPoll.superseded` (closed under its owner and the number watched in this set by
    /// another object since: nothing was touched, and nothing will be). Without `force`, an
    /// interest already armed costs no system call. Caller holds the owner's lock.
    func arm(_ interest: UInt32, force: Bool = false) -> Int32 {
        guard interest != 0, force || interest != armed, let poll else { return 0 }
        let events = interest | EpollBits.oneShot
        if let token {
            let error = poll.modify(token, events: events)
            armed = error == 0 ? interest : 0
            return error
        }
        switch poll.watchOrFail(fd, events: events, watcher: self) {
        case .success(let newToken):
            token = newToken
            armed = interest
            return 0
        case .failure(let error):
            return error.code
        }
    }

    /// The kernel reported and disarmed the registration. Caller holds the owner's lock.
    func disarmed() { armed = 0 }

    /// Removes the descriptor from the set (before it is closed); a superseded registration only
    /// forgets its token (the number's entry is its new owner's). Caller holds the owner's lock.
    func cancel() {
        if let token { poll?.unwatch(token) }
        token = nil
        armed = 0
    }

    func descriptorReady(_ fd: Int32, events: UInt32) {
        handler?.descriptorReady(self, events: events)
    }
}
