// TKSocketPort+Receiving: the listening port's side, on the I/O loop's thread (the loop whose
// epoll set watches the listening socket and the accepted connections).
//
// One readiness report, in steps:
//   1. The listening socket: accept up to `acceptBatch` connections under `listener`. Out of
//      descriptors: stop watching it and retry from a timer (DescriptorShortage), never spin.
//   2. With no lock held: check each new connection's peer against `allowedPeers` (Unix sockets),
//      then watch the admitted ones (under `listener` again; closed if the port was invalidated).
//   3. A connection: read at most 16 × 64 KiB. The decoder's possible growth is reserved from
//      the process's unfinished-frame budget (UnfinishedFrameBudget): on a port without an
//      authenticator after each read and before the append, and a connection that cannot get it
//      is shed; on an authenticating port before each read, and a connection that cannot get it
//      waits (below). Every complete frame or segment is verified (authenticator) and decoded;
//      complete messages are pushed to the inbox. A segmented message's whole size (plus the
//      raw workspace) is reserved when its verified first segment arrives ("admitted"); from
//      then on the connection keeps that charged and never waits until the message is done.
//      Afterwards what the decoder holds (at least its charge floor) is what stays charged. An
//      inbox over its limit pauses the connection until the loop delivers.
//   4. Reports (refused frames and peers, shed connections) go to the handler with no lock held.
//
// Waiting for the budget (authenticating ports only): the connection is not watched for input
// (epoll still reports a hang-up or an error, which closes it), so its sender waits in the
// kernel's buffers and, past its deadline, its send fails; nothing already written is dropped.
// A one-shot timer on the I/O loop (`budgetRetryDelay`) retries every waiting connection of the
// port: first the buffered first segment's admission, then the next read's reservation.
// Connections holding an admitted message never wait, so some connection always progresses.
import CThreadKit
import Glibc

extension TKSocketPort {
    /// The most connections accepted per readiness report, for fairness with the loop's other
    /// work; the listening socket stays ready (level-triggered) for the rest.
    static let acceptBatch = 64
    static let readEvents: UInt32 = 0x1 | 0x2000 // EPOLLIN | EPOLLRDHUP

    func startListening(on loop: TKRunLoop) {
        listener.withLock { s in
            guard s.poll == nil, s.listenFD >= 0 else { return }
            s.poll = loop.poll
            s.listenToken = loop.poll.watch(s.listenFD, events: 0x1 /* EPOLLIN */, watcher: self)
        }
    }

    /// How long connections waiting for the unfinished-frame budget wait before they try again.
    static let budgetRetryDelay: Duration = .milliseconds(10)

    func descriptorReady(_ fd: Int32, events: UInt32) {
        var reports: [TKError] = []
        var accepted: [Int32] = []
        var outOfDescriptors = false
        var wantTimer = false
        let authenticator = self.authenticator
        let handler = listener.withLock { s -> (@Sendable (TKError) -> Void)? in
            if fd == s.listenFD {
                outOfDescriptors = accept(&s, into: &accepted)
            } else if s.connections[fd] != nil {
                read(fd, events: events, &s, &reports, authenticator)
            }
            wantTimer = s.budgetTimerWanted
            s.budgetTimerWanted = false
            return s.handler
        }
        if !accepted.isEmpty { admit(accepted, &reports) }
        if outOfDescriptors { pauseAccepting() }
        if wantTimer { startBudgetRetryTimer() }
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
                    Glibc.close(fd) // invalidated meanwhile, or epoll refused
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
    /// every complete message, and closes the connection on EOF, an error, a bad frame or (no
    /// authenticator) a spent budget; with an authenticator, a spent budget makes it wait.
    private func read(
        _ fd: Int32, events: UInt32, _ s: inout ListenerState, _ reports: inout [TKError], _ authenticator: TKSocketPortAuthenticator?
    ) {
        guard let readBuffer else { return }
        if s.connections[fd]!.waitingForBudget {
            // Not watched for input while it waits: only a hang-up or an error is reported here.
            if events & EpollBits.failure != 0 {
                closeConnection(
                    fd, &s, &reports, because: "the connection failed or hung up while it waited for the unfinished-frame budget")
            }
            return
        }
        let waits = authenticator != nil
        for _ in 0..<16 {
            if waits && !reserveBeforeReading(fd, &s, readBuffer.count) {
                waitForBudget(fd, &s)
                return
            }
            let n = Glibc.read(fd, readBuffer.baseAddress, readBuffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN {
                    settleCharge(fd, &s)
                    return
                }
                closeConnection(fd, &s, &reports, because: "read failed (\(SystemCall.errorName(errno)))")
                return
            }
            if n == 0 {
                // The peer closed: fine between messages, a truncated one otherwise.
                let unfinished = s.connections[fd]!.decoder.unfinishedByteCount
                closeConnection(
                    fd, &s, &reports, because: unfinished > 0 ? PortWireFormat.FrameError.truncated(unfinished).description : nil)
                return
            }
            if !waits {
                // Reserve what the decoder may grow to before it allocates.
                let wanted = s.connections[fd]!.decoder.heldByteCount(appending: n)
                let charged = s.connections[fd]!.charged
                if wanted > charged {
                    guard UnfinishedFrameBudget.reserve(wanted - charged) else {
                        closeConnection(fd, &s, &reports, because: overBudget(wanted))
                        return
                    }
                    s.connections[fd]!.charged = wanted
                }
            }
            s.connections[fd]!.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
            guard decode(fd, &s, &reports, authenticator) else { return }
            if s.connections[fd]!.paused { return }
        }
        settleCharge(fd, &s)
    }

    private func overBudget(_ wanted: Int) -> String {
        "it would hold \(wanted) bytes of unfinished frames, over what is left of the process's budget "
            + "(TKSocketPort.unfinishedFrameBudget = \(UnfinishedFrameBudget.limit) bytes, \(UnfinishedFrameBudget.held) held). "
            + "Fix: raise the budget, or send smaller messages"
    }

    /// Decodes what the connection's decoder holds: queues every complete message, admits a
    /// segmented message if the budget has room for it, and settles the charge. False if the
    /// connection was closed, or waits for the budget.
    private func decode(_ fd: Int32, _ s: inout ListenerState, _ reports: inout [TKError], _ authenticator: TKSocketPortAuthenticator?)
        -> Bool
    {
        var charged = s.connections[fd]!.charged
        var blocked: Int?
        decoding: while true {
            let step = s.connections[fd]!.decoder.next(verifier: authenticator?.verify) { floor in
                // Reserve what the admitted message keeps charged until it is complete.
                guard floor > charged else { return true }
                guard UnfinishedFrameBudget.reserve(floor - charged) else { return false }
                charged = floor
                return true
            }
            switch step {
            case .success(let frame?):
                _ = inbox.pushUnbounded(message(from: frame, authenticator))
            case .success(nil):
                blocked = s.connections[fd]!.decoder.waitingForAdmission
                break decoding
            case .failure(let error):
                s.connections[fd]!.charged = charged
                closeConnection(fd, &s, &reports, because: error.description)
                return false
            }
        }
        s.connections[fd]!.charged = charged
        if let floor = blocked {
            if floor > UnfinishedFrameBudget.limit || authenticator == nil {
                // Never fits, or a port that sheds instead of waiting.
                let why =
                    floor > UnfinishedFrameBudget.limit
                    ? "a message of \(floor - PortWireFormat.Decoder.rawWorkspace) bytes needs \(floor) bytes of the unfinished-frame budget, more than all of it "
                        + "(TKSocketPort.unfinishedFrameBudget = \(UnfinishedFrameBudget.limit) bytes). Fix: raise the budget, or send smaller messages"
                    : overBudget(floor)
                closeConnection(fd, &s, &reports, because: why)
                return false
            }
            settleCharge(fd, &s)
            waitForBudget(fd, &s)
            return false
        }
        settleCharge(fd, &s)
        if inbox.isOverLimit {
            // Stop reading until the loop delivers: the kernel's buffers, then the sender, wait.
            s.connections[fd]!.paused = true
            s.poll?.modify(s.connections[fd]!.token, events: 0)
        }
        return true
    }

    /// Keeps charged what the decoder holds now, and at least its floor (a drained decoder gave
    /// its buffer back; an admitted message keeps its share). A decoder that grew a little past
    /// its reservation (malloc's rounding) takes the difference without a check.
    private func settleCharge(_ fd: Int32, _ s: inout ListenerState) {
        let decoder = s.connections[fd]!.decoder
        let held = max(decoder.heldByteCount, decoder.chargeFloor)
        UnfinishedFrameBudget.release(s.connections[fd]!.charged - held)
        s.connections[fd]!.charged = held
    }

    /// Reserves what the decoder may grow to if the next read fills the read buffer. A
    /// connection assembling an admitted message takes it without a check (only malloc's
    /// rounding can go past its floor), so it never waits. False: no room now.
    private func reserveBeforeReading(_ fd: Int32, _ s: inout ListenerState, _ count: Int) -> Bool {
        let decoder = s.connections[fd]!.decoder
        let wanted = max(decoder.heldByteCount(appending: count), decoder.chargeFloor)
        let charged = s.connections[fd]!.charged
        guard wanted > charged else { return true }
        if decoder.isAssembling {
            UnfinishedFrameBudget.release(charged - wanted)
        } else if !UnfinishedFrameBudget.reserve(wanted - charged) {
            return false
        }
        s.connections[fd]!.charged = wanted
        return true
    }

    /// Stops reading the connection until the budget has room; the retry timer looks again.
    private func waitForBudget(_ fd: Int32, _ s: inout ListenerState) {
        UnfinishedFrameBudget.countWait()
        s.connections[fd]!.waitingForBudget = true
        s.poll?.modify(s.connections[fd]!.token, events: 0)
        if !s.budgetRetryScheduled {
            s.budgetRetryScheduled = true
            s.budgetTimerWanted = true
        }
    }

    /// Adds the one-shot retry timer to the I/O loop (this thread's), in the port's modes there.
    private func startBudgetRetryTimer() {
        let loop = TKRunLoop.current
        let timer = TKTimer(fireAt: .now + TKSocketPort.budgetRetryDelay, interval: .zero, repeats: false) { [weak self] _ in
            self?.retryBudgetWaiters()
        }
        let modes = modes(on: loop)
        for mode in modes.isEmpty ? [.default] : modes { loop.add(timer, forMode: mode) }
    }

    /// The retry timer: each connection waiting for the budget tries again, first to admit the
    /// message whose first segment it holds, then to reserve its next read; those that succeed
    /// are read again.
    private func retryBudgetWaiters() {
        var reports: [TKError] = []
        var wantTimer = false
        let authenticator = self.authenticator
        let handler = listener.withLock { s -> (@Sendable (TKError) -> Void)? in
            s.budgetRetryScheduled = false
            let waiting = s.connections.filter { $0.value.waitingForBudget }.map(\.key)
            for fd in waiting {
                s.connections[fd]!.waitingForBudget = false
                if s.connections[fd]!.decoder.waitingForAdmission != nil {
                    guard decode(fd, &s, &reports, authenticator) else { continue } // closed, or waits again
                }
                guard let count = readBuffer?.count, reserveBeforeReading(fd, &s, count) else {
                    waitForBudget(fd, &s)
                    continue
                }
                if !s.connections[fd]!.paused { s.poll?.modify(s.connections[fd]!.token, events: TKSocketPort.readEvents) }
            }
            wantTimer = s.budgetTimerWanted
            s.budgetTimerWanted = false
            return s.handler
        }
        if wantTimer { startBudgetRetryTimer() }
        for report in reports {
            if let handler { handler(report) } else { TKSocketPort.log(report) }
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
                // One also waiting for the budget is read again when the retry finds room.
                if !connection.waitingForBudget { s.poll?.modify(connection.token, events: TKSocketPort.readEvents) }
            }
        }
    }

    static func log(_ error: TKError) {
        var line = "ThreadKit: \(error.message)\n"
        line.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
