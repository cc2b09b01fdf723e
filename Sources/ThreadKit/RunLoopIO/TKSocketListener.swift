// TKSocketListener: CFSocket with an accept callback. A listening TCP socket whose connections
// are accepted on the thread of the run loop it is scheduled on, in the scheduled modes
// (docs/RunLoopIO.md, "Listener").
//
// Threads: init, scheduling and `invalidate` from any thread; accepting and the callback on a
// loop thread. `state` guards the lifecycle, the registrations and the retry timer; it is never
// held while calling the callback, TKRunLoop.add/remove or a timer's loop.
import CThreadKit
import Glibc
import Synchronization

// safety: the mutable state is a `Protected`; the rest is immutable.
/// A listening TCP socket that accepts on a run loop (CFSocket's accept callback).
public final class TKSocketListener: @unchecked Sendable {
    /// The most connections accepted per readiness report, so one busy listener cannot starve the
    /// loop's other sources; the rest are accepted in the next pass.
    static let acceptBatch = 64

    private struct State {
        var listenFD: Int32
        var registrations: [ObjectIdentifier: DescriptorRegistration] = [:]
        /// Connections are waiting (reported by epoll, or left over from a full batch).
        var pending = false
        /// Out of descriptors: not watching until the retry timer fires.
        var retryTimer: TKTimer?
    }

    /// The bound port (the one chosen by the system when `port` was 0).
    public let port: UInt16
    private let acceptCallback: @Sendable (Int32) -> Void
    private let state: Protected<State>
    private let presence = LoopPresence()

    /// Binds `host`:`port` (0: any free port) and listens with `backlog`. The callback receives
    /// each accepted socket (non-blocking, close-on-exec) on the loop's thread and owns it.
    public init(
        host: String = "127.0.0.1", port: UInt16 = 0, backlog: Int32 = 128,
        accept: @escaping @Sendable (_ connectedSocket: Int32) -> Void
    ) throws(TKError) {
        var bound: UInt16 = 0
        var gai: Int32 = 0
        let fd = tk_tcp_listen_backlog(host, port, backlog, &bound, &gai)
        guard fd >= 0 else {
            if gai != 0 {
                throw TKError(
                    .invalidArgument,
                    "TKSocketListener(host: \"\(host)\", port: \(port)): the host does not resolve "
                        + "(\(String(cString: gai_strerror(gai)))). Fix: use an address such as 127.0.0.1.")
            }
            let fix =
                -fd == EADDRINUSE ? "Fix: pick another port, or 0 for any free one." : "Fix: check the address and the process's limits."
            throw TKError(.systemCall, "TKSocketListener cannot listen on \(host):\(port). \(fix)", errno: -fd)
        }
        self.port = bound
        acceptCallback = accept
        state = Protected(State(listenFD: fd))
    }

    deinit {
        // Reached only when no loop holds the listener.
        state.withLock { s in closeLocked(&s) }
    }

    /// Accepts on `loop`'s thread while it runs `mode` (`.common`: the common modes).
    public func schedule(in loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        guard isValid else { return }
        presence.add(self, to: loop, forMode: mode)
    }

    /// Stops accepting on `loop` while it runs `mode` (`.common`: every common mode), like
    /// removing the CFSocket's run-loop source. Once the listener is in no mode of `loop`, that
    /// loop stops watching the socket and lets go of the listener; connections arriving meanwhile
    /// wait in the kernel's backlog and are accepted once it is scheduled again. The socket stays
    /// open. Thread-safe; a mode it is not in is left alone.
    public func remove(from loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        presence.remove(from: loop, forMode: mode)
    }

    /// Stops accepting and closes the listening socket. Connections already accepted stay open.
    public func invalidate() {
        let timer = state.withLock { s -> TKTimer? in
            defer { closeLocked(&s) }
            return s.retryTimer
        }
        timer?.invalidate()
        presence.invalidate()
    }

    /// False once `invalidate()` closed the listening socket (CFSocketIsValid); an invalid
    /// listener cannot be scheduled again. Thread-safe.
    public var isValid: Bool { state.withLock { $0.listenFD >= 0 } }

    /// Caller holds `state`.
    private func closeLocked(_ s: inout State) {
        state.assertHeld("TKSocketListener.state")
        for registration in s.registrations.values { registration.cancel() }
        s.registrations.removeAll()
        if s.listenFD >= 0 { close(s.listenFD) }
        s.listenFD = -1
        s.retryTimer = nil
    }

    /// Accepts up to a batch and hands each socket to the callback with no lock held.
    private func acceptBatch() {
        var accepted: [Int32] = []
        var outOfDescriptors = false
        state.withLock { s in
            guard s.listenFD >= 0, s.pending, s.retryTimer == nil else { return }
            s.pending = false
            accepting: while accepted.count < Self.acceptBatch {
                switch AcceptOutcome(acceptingOn: s.listenFD) {
                case .accepted(let fd): accepted.append(fd)
                case .connectionGone: continue
                case .outOfDescriptors:
                    outOfDescriptors = true
                    break accepting
                case .drained, .failed: break accepting
                }
            }
            if accepted.count == Self.acceptBatch { s.pending = true } // more may wait
            if !outOfDescriptors {
                for registration in s.registrations.values { _ = registration.arm(EpollBits.input) }
            }
        }
        for fd in accepted { acceptCallback(fd) }
        if outOfDescriptors { pauseForDescriptors() }
        if state.withLock({ $0.pending }) { presence.signal() }
    }

    /// Out of descriptors: leave the connections in the kernel's backlog (not watching, so no
    /// busy loop) and try again from a timer on this loop, in the modes the listener is in
    /// (DescriptorShortage).
    private func pauseForDescriptors() {
        DescriptorShortage.warnOnce("TKSocketListener on port \(port)")
        let loop = TKRunLoop.current
        let timer = DescriptorShortage.retryTimer { [weak self] in self?.resumeAfterRetry() }
        let modes = presence.modes(of: loop)
        let accepted = state.withLock { s -> Bool in
            guard s.listenFD >= 0 else { return false }
            s.retryTimer = timer
            return true
        }
        guard accepted else { return }
        for mode in modes { loop.add(timer, forMode: mode) }
    }

    private func resumeAfterRetry() {
        state.withLock { s in
            s.retryTimer = nil
            s.pending = s.listenFD >= 0
        }
        presence.signal()
    }
}

extension TKSocketListener: LoopPresenceOwner, ReadinessHandler {
    func joined(_ loop: TKRunLoop) {
        state.withLock { s in
            guard s.listenFD >= 0 else { return }
            let registration = DescriptorRegistration(fd: s.listenFD, loop: loop, handler: self)
            s.registrations[ObjectIdentifier(loop)] = registration
            if s.retryTimer == nil { _ = registration.arm(EpollBits.input) }
        }
    }

    func left(_ loop: TKRunLoop) {
        state.withLock { s in s.registrations.removeValue(forKey: ObjectIdentifier(loop))?.cancel() }
    }

    func descriptorReady(_ registration: DescriptorRegistration, events: UInt32) {
        state.withLock { s in
            registration.disarmed()
            s.pending = s.listenFD >= 0
        }
        presence.signal()
    }

    func perform() { acceptBatch() }
}
