// TKSocketPort+Receiving: the listening port's side, on the I/O loop's thread (the loop whose
// epoll set watches the listening socket and the accepted connections).
//
// One readiness report, in steps:
//   1. The listening socket: accept up to `acceptBatch` connections under `listener`. Out of
//      descriptors: stop watching it and retry from a timer (DescriptorShortage), never spin.
//   2. With no lock held: check each new connection's peer against `allowedPeers` (Unix sockets),
//      then watch the admitted ones (under `listener` again; closed if the port was invalidated).
//   3. A connection: read at most 16 × 64 KiB. Before each append the decoder's possible growth
//      is reserved from the process's unfinished-frame budget (UnfinishedFrameBudget); a
//      connection that cannot get it is shed. Every complete frame is verified (authenticator)
//      and decoded, then pushed to the inbox; what the decoder holds afterwards is what stays
//      charged. An inbox over its limit pauses the connection until the loop delivers.
//   4. Reports (refused frames and peers, shed connections) go to the handler with no lock held.
import CThreadKit
import Glibc

extension TKSocketPort {
    /// The most connections accepted per readiness report, for fairness with the loop's other
    /// work; the listening socket stays ready (level-triggered) for the rest.
    static let acceptBatch = 64
    static let readEvents: UInt32 = 0x1 | 0x2000   // EPOLLIN | EPOLLRDHUP

    func startListening(on loop: TKRunLoop) {
        listener.withLock { s in
            guard s.poll == nil, s.listenFD >= 0 else { return }
            s.poll = loop.poll
            s.listenToken = loop.poll.watch(s.listenFD, events: 0x1 /* EPOLLIN */, watcher: self)
        }
    }

    func descriptorReady(_ fd: Int32, events: UInt32) {
        var reports: [TKError] = []
        var accepted: [Int32] = []
        var outOfDescriptors = false
        let authenticator = self.authenticator
        let handler = listener.withLock { s -> (@Sendable (TKError) -> Void)? in
            if fd == s.listenFD {
                outOfDescriptors = accept(&s, into: &accepted)
            } else if s.connections[fd] != nil {
                read(fd, &s, &reports, authenticator)
            }
            return s.handler
        }
        if !accepted.isEmpty { admit(accepted, &reports) }
        if outOfDescriptors { pauseAccepting() }
        for report in reports {
            if let handler { handler(report) } else { TKSocketPort.log(report) }
        }
    }

    /// Accepts up to a batch; true if the process is out of descriptors.
    private func accept(_ s: inout ListenerState, into accepted: inout [Int32]) -> Bool {
        guard s.poll != nil, !s.acceptPaused else { return false }
        while accepted.count < TKSocketPort.acceptBatch {
            switch AcceptOutcome(acceptingOn: s.listenFD) {
            case .accepted(let fd): accepted.append(fd)
            case .connectionGone: continue
            case .outOfDescriptors: return true
            case .drained, .failed: return false
            }
        }
        return false
    }

    /// Checks the peers of new connections (no lock held: a custom rule is user code), then
    /// watches those admitted.
    private func admit(_ accepted: [Int32], _ reports: inout [TKError]) {
        var admitted: [Int32] = []
        if case .unix = address {
            let rule = allowedPeers
            for fd in accepted {
                if let refusal = refusal(ofPeerOn: fd, by: rule) {
                    Glibc.close(fd)
                    reports.append(TKError(.protocolViolation, "\(self) refused a connection: \(refusal)"))
                } else {
                    admitted.append(fd)
                }
            }
        } else {
            admitted = accepted
        }
        listener.withLock { s in
            for fd in admitted {
                guard s.listenFD >= 0, let poll = s.poll, let token = poll.watch(fd, events: TKSocketPort.readEvents, watcher: self) else {
                    Glibc.close(fd)   // invalidated meanwhile, or epoll refused
                    continue
                }
                s.connections[fd] = Connection(token: token)
            }
        }
    }

    /// Out of descriptors: stop watching the listening socket (it stays readable while connections
    /// wait, and would spin the loop) and watch it again from a timer on this loop.
    private func pauseAccepting() {
        DescriptorShortage.warnOnce("\(self)")
        let paused = listener.withLock { s -> Bool in
            guard s.listenFD >= 0, let token = s.listenToken, !s.acceptPaused else { return false }
            s.acceptPaused = true
            s.poll?.modify(token, events: 0)
            return true
        }
        guard paused else { return }
        let loop = TKRunLoop.current
        let timer = DescriptorShortage.retryTimer { [weak self] in self?.resumeAccepting() }
        let modes = modes(on: loop)
        for mode in modes.isEmpty ? [.default] : modes { loop.add(timer, forMode: mode) }
    }

    private func resumeAccepting() {
        listener.withLock { s in
            guard s.acceptPaused else { return }
            s.acceptPaused = false
            if s.listenFD >= 0, let token = s.listenToken { s.poll?.modify(token, events: 0x1 /* EPOLLIN */) }
        }
    }

    /// Reads what is there (a bounded amount, for fairness with the loop's other work), queues
    /// every complete frame, and closes the connection on EOF, an error, a bad frame or a spent
    /// budget.
    private func read(_ fd: Int32, _ s: inout ListenerState, _ reports: inout [TKError], _ authenticator: TKSocketPortAuthenticator?) {
        guard let readBuffer else { return }
        for _ in 0..<16 {
            let n = Glibc.read(fd, readBuffer.baseAddress, readBuffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { return }
                closeConnection(fd, &s, &reports, because: "read failed (\(SystemCall.errorName(errno)))")
                return
            }
            if n == 0 {
                // The peer closed: fine between frames, a truncated frame otherwise.
                let pending = s.connections[fd]!.decoder.pendingByteCount
                closeConnection(fd, &s, &reports, because: pending > 0 ? PortWireFormat.FrameError.truncated(pending).description : nil)
                return
            }
            // Reserve what the decoder may grow to before it allocates.
            let wanted = s.connections[fd]!.decoder.heldByteCount(appending: n)
            let charged = s.connections[fd]!.charged
            if wanted > charged {
                guard UnfinishedFrameBudget.reserve(wanted - charged) else {
                    closeConnection(fd, &s, &reports, because: "it would hold \(wanted) bytes of unfinished frames, over what is left of the process's budget "
                                    + "(TKSocketPort.unfinishedFrameBudget = \(UnfinishedFrameBudget.limit) bytes, \(UnfinishedFrameBudget.held) held). "
                                    + "Fix: raise the budget, or send smaller messages")
                    return
                }
                s.connections[fd]!.charged = wanted
            }
            s.connections[fd]!.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
            decoding: while true {
                switch s.connections[fd]!.decoder.next(verifier: authenticator?.verify) {
                case .success(let frame?):
                    _ = inbox.pushUnbounded(message(from: frame, authenticator))
                case .success(nil):
                    break decoding
                case .failure(let error):
                    closeConnection(fd, &s, &reports, because: error.description)
                    return
                }
            }
            // Keep charged what the decoder holds now (a drained decoder gave its buffer back).
            let held = s.connections[fd]!.decoder.heldByteCount
            UnfinishedFrameBudget.release(s.connections[fd]!.charged - held)
            s.connections[fd]!.charged = held
            if inbox.isOverLimit {
                // Stop reading until the loop delivers: the kernel's buffers, then the sender, wait.
                s.connections[fd]!.paused = true
                s.poll?.modify(s.connections[fd]!.token, events: 0)
                return
            }
        }
    }

    /// The message a frame carries. Its reply port and port components become remote ports
    /// (shared per address); after an authenticated frame they sign with the same authenticator.
    private func message(from frame: PortWireFormat.Frame, _ authenticator: TKSocketPortAuthenticator?) -> QueuedPortMessage {
        func remote(_ address: TKSocketAddress) -> TKSocketPort {
            let port = TKSocketPort.remote(for: address)
            if let authenticator { port.adopt(authenticator) }
            return port
        }
        let components = frame.components.map { component -> TKPortMessage.Component in
            switch component {
            case .data(let bytes): return .data(bytes)
            case .port(let address): return .port(remote(address))
            }
        }
        return QueuedPortMessage(msgid: frame.msgid, components: components, replyPort: frame.reply.map(remote))
    }

    /// Closes an accepted connection; a reason (nil: the peer simply hung up) is reported.
    private func closeConnection(_ fd: Int32, _ s: inout ListenerState, _ reports: inout [TKError], because reason: String?) {
        guard let connection = s.connections.removeValue(forKey: fd) else { return }
        s.poll?.unwatch(connection.token)
        Glibc.close(fd)
        UnfinishedFrameBudget.release(connection.charged)
        if let reason { reports.append(TKError(.protocolViolation, "\(self) closed a connection: \(reason)")) }
    }

    func resumePausedConnections() {
        listener.withLock { s in
            for (fd, connection) in s.connections where connection.paused {
                s.connections[fd]!.paused = false
                s.poll?.modify(connection.token, events: TKSocketPort.readEvents)
            }
        }
    }

    static func log(_ error: TKError) {
        var line = "ThreadKit: \(error.message)\n"
        line.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
