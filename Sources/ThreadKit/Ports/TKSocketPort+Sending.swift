// TKSocketPort+Sending: the remote port's side. The sending thread encodes the message (as signed
// segments when the port has an authenticator), connects on first use and writes the whole frame
// (every segment) under `sender`; a connection that shows its peer gone is replaced before the
// write. True means written before the deadline, not read (docs/Ports.md, "What send(before:)
// returning true means").
import CThreadKit
import Glibc

extension TKSocketPort {
    /// What a port component or reply port carries for `port`, or why it cannot cross processes.
    private static func wireAddress(of port: TKPort) -> TKSocketAddress? {
        (port as? TKSocketPort)?.address
    }

    /// `transmit` for a remote port.
    func transmitRemote(_ message: TKPortMessage, before deadline: ContinuousClock.Instant) -> Bool {
        guard isValid else {
            message.failureReason = "\(self) is invalid. Fix: create a new port for the remote listener."
            return false
        }
        var frame = PortWireFormat.Frame(msgid: message.msgid, reply: nil, components: [])
        if let reply = message.receivePort {
            guard let address = TKSocketPort.wireAddress(of: reply) else {
                message.failureReason =
                    "the reply port \(reply) is a TKMessagePort, which cannot cross processes. Fix: use a listening TKSocketPort as receivePort."
                return false
            }
            frame.reply = address
        }
        for component in message.components {
            switch component {
            case .data(let bytes): frame.components.append(.data(bytes))
            case .port(let port):
                guard let address = TKSocketPort.wireAddress(of: port) else {
                    message.failureReason =
                        "a port component (\(port)) is a TKMessagePort, which cannot cross processes. Fix: send a TKSocketPort."
                    return false
                }
                frame.components.append(.port(address))
            }
        }
        switch PortWireFormat.encode(frame, sign: authenticator?.sign) {
        case .failure(let error):
            message.failureReason =
                "message \(message.msgid) cannot be sent through \(self): \(error). Fix: send less data, fewer components or fewer ports per message."
            return false
        case .success(let bytes):
            return sender.withLock {
                if let failure = write(bytes, before: deadline) {
                    message.failureReason = "\(self): \(failure)"
                    return false
                }
                return true
            }
        }
    }

    /// Writes one whole frame, connecting first if needed. Returns why it failed, nil on success.
    /// Caller holds `sender`.
    func write(_ bytes: [UInt8], before deadline: ContinuousClock.Instant) -> String? {
        // The listener never writes back on this connection: readable or hung up means it is gone.
        if remoteFD >= 0 && tk_peer_gone(remoteFD) != 0 { dropConnection() }
        if remoteFD < 0, let failure = connect(before: deadline) { return failure }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { tk_send(remoteFD, $0.baseAddress! + offset, $0.count - offset) }
            if n > 0 {
                offset += n
                continue
            }
            if n == -Int(EAGAIN) {
                let remaining = deadline - ContinuousClock.now
                if remaining > .zero, tk_poll1(remoteFD, Int16(TK_POLLOUT), TKSocketPort.milliseconds(remaining)) > 0 { continue }
                // Part of a frame may be out: the stream cannot carry another one. Start over.
                dropConnection()
                return "the peer did not take the message before the deadline. Fix: give send(before:) a later deadline."
            }
            dropConnection()
            return "the peer disappeared (\(SystemCall.errorName(Int32(-n)))). Fix: restart the listener; later sends reconnect."
        }
        return nil
    }

    func connect(before deadline: ContinuousClock.Instant) -> String? {
        var inProgress: Int32 = 0
        var gai: Int32 = 0
        let fd: Int32
        switch address {
        case .tcp(let host, let port): fd = tk_tcp_connect(host, port, &inProgress, &gai)
        case .unix(let path): fd = tk_unix_connect(path, &inProgress)
        }
        guard fd >= 0 else { return "cannot connect (\(SystemCall.errorName(-fd))). Fix: start the listener first." }
        if inProgress != 0 {
            let remaining = deadline - ContinuousClock.now
            let ready = remaining > .zero ? tk_poll1(fd, Int16(TK_POLLOUT), TKSocketPort.milliseconds(remaining)) : 0
            let error = ready > 0 ? tk_socket_error(fd) : ETIMEDOUT
            if error != 0 {
                Glibc.close(fd)
                return
                    "cannot connect (\(SystemCall.errorName(error))). Fix: start the listener first, or give send(before:) a later deadline."
            }
        }
        remoteFD = fd
        return nil
    }

    func dropConnection() {
        if remoteFD >= 0 { Glibc.close(remoteFD) }
        remoteFD = -1
    }

    /// A poll(2) timeout covering `duration`, rounded up to whole milliseconds.
    private static func milliseconds(_ duration: Duration) -> Int32 {
        duration.pollMilliseconds // saturating: a far-future deadline must not trap
    }
}
