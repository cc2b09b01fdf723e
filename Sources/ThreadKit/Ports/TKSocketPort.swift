// TKSocketPort: ports between processes (NSSocketPort's role), over TCP or Unix sockets, with the
// frames of PortWireFormat.swift (docs/PortWireFormat.md).
//
// Two kinds, fixed at init:
//   - a listening port (init(tcpPort:), init(unixSocketPath:)) receives. Its listening socket and
//     the connections it accepts live in the epoll set of the first run loop it joins (the "I/O
//     loop"); that loop's thread accepts, reads and decodes (EventPoll's descriptor watchers), and
//     every loop holding the port delivers through TKPort's inbox, as for TKMessagePort.
//   - a remote port (init(remoteHost:port:), init(unixSocketPath:remote: true)) sends. The
//     sending thread connects on first use and writes whole frames under `sender`.
// `listener` guards the listening state (descriptors, decoders, paused connections); it is taken
// by the I/O loop thread, by `invalidate()` and by the inbox's drain hook, never while a loop lock
// is held, and the inbox lock is taken inside it (lock order: listener, then inbox). Handlers
// (`connectionErrorHandler`) run after it is released. `sender` guards the remote connection and
// is held across a blocking write, so frames from different threads never interleave.
import CThreadKit
import Glibc
import Synchronization

/// A port that carries messages between processes over a TCP connection on loopback (or to
/// another host), or over a Unix socket.
public final class TKSocketPort: TKPort, @unchecked Sendable, CustomStringConvertible, DescriptorWatcher {
    /// How many received, undelivered messages a listening port holds before it stops reading
    /// (the senders then wait in the kernel's socket buffers).
    public static let defaultQueueLimit = 65_536

    /// Where the port listens (a listening port) or what it reaches (a remote port).
    public let address: TKSocketAddress
    /// True for the sending end of a remote listener.
    public let isRemote: Bool

    private struct Connection {
        let token: UInt64
        var decoder = PortWireFormat.Decoder()
        var paused = false
    }

    private struct ListenerState {
        var listenFD: Int32 = -1
        /// The I/O loop's poll, set when the port first joins a loop.
        var poll: EventPoll?
        var listenToken: UInt64?
        var connections: [Int32: Connection] = [:]
        var handler: (@Sendable (TKError) -> Void)?
    }

    private let listener = Protected(ListenerState())
    /// The connection of a remote port, -1 when none. Guarded by `sender`.
    private var remoteFD: Int32 = -1
    private let sender = RawMutex()
    /// Read buffer of the I/O loop. Guarded by `listener`.
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 8)

    // MARK: Creating ports

    /// Listens on 127.0.0.1 at `tcpPort` (0: any free port; see `localPort`).
    public convenience init(tcpPort: UInt16) throws {
        var bound: UInt16 = 0
        var gai: Int32 = 0
        let fd = tk_tcp_listen("127.0.0.1", tcpPort, &bound, &gai)
        guard fd >= 0 else {
            let fix = -fd == EADDRINUSE ? "Fix: pick another port, or 0 for any free one." : "Fix: check the port number and the process's limits."
            throw TKError(.systemCall, "TKSocketPort(tcpPort: \(tcpPort)) cannot listen on 127.0.0.1:\(tcpPort). \(fix)", errno: -fd)
        }
        self.init(listening: fd, address: .tcp(host: "127.0.0.1", port: bound))
    }

    /// The sending end for a listener at `remoteHost`:`port`. The host must resolve; the
    /// connection is made by the first send.
    public convenience init(remoteHost: String, port: UInt16) throws {
        guard port != 0 else {
            throw TKError(.invalidArgument, "TKSocketPort(remoteHost: \(remoteHost), port: 0): port 0 cannot be reached. Fix: use the listener's localPort.")
        }
        let gai = tk_resolve(remoteHost)
        guard !remoteHost.isEmpty, gai == 0 else {
            throw TKError(.invalidArgument, "TKSocketPort(remoteHost: \"\(remoteHost)\", port: \(port)): the host does not resolve"
                          + "\(gai == 0 ? "" : " (\(String(cString: gai_strerror(gai))))"). Fix: use an address such as 127.0.0.1 or a known host name.")
        }
        self.init(remote: .tcp(host: remoteHost, port: port))
    }

    /// Listens on the Unix socket at `path`. A stale socket file left by a process that is gone
    /// is replaced; a path another listener serves is refused.
    public convenience init(unixSocketPath path: String) throws {
        try self.init(unixSocketPath: path, remote: false)
    }

    /// With `remote` false, listens on the Unix socket at `path`; with true, the sending end for
    /// the listener there (connected by the first send).
    public convenience init(unixSocketPath path: String, remote: Bool) throws {
        guard !path.isEmpty, path.utf8.count < 108 else {
            throw TKError(.invalidArgument, "TKSocketPort(unixSocketPath: \"\(path)\"): a Unix socket path must have 1 to 107 bytes. Fix: use a shorter path, e.g. in /tmp.")
        }
        if remote {
            self.init(remote: .unix(path: path))
            return
        }
        try TKSocketPort.clearStaleSocket(path)
        let fd = tk_unix_listen(path)
        guard fd >= 0 else {
            let fix = -fd == ENOENT ? "Fix: create the directory first." : "Fix: check the path and its directory's permissions."
            throw TKError(.systemCall, "TKSocketPort(unixSocketPath: \"\(path)\") cannot listen there. \(fix)", errno: -fd)
        }
        self.init(listening: fd, address: .unix(path: path))
    }

    private init(listening fd: Int32, address: TKSocketAddress) {
        self.address = address
        isRemote = false
        super.init(inboxLimit: TKSocketPort.defaultQueueLimit)
        listener.withLock { $0.listenFD = fd }
        // Set before the port is shared; called by the delivering loop after it took a batch.
        inbox.onDrained = { [weak self] in self?.resumePausedConnections() }
    }

    private init(remote address: TKSocketAddress) {
        self.address = address
        isRemote = true
        super.init(inboxLimit: 1)
    }

    deinit {
        // An invalidated port has closed everything already; a dropped valid one closes here.
        closeEverything()
        sender.deallocate()
        readBuffer.deallocate()
    }

    /// The TCP port a listening TCP port is bound to; nil for remote and Unix-socket ports.
    public var localPort: UInt16? {
        if !isRemote, case .tcp(_, let port) = address { return port }
        return nil
    }

    /// Told when a connection is closed because of what came over it (malformed, truncated or
    /// oversized frames, read errors). Default: a line on standard error. Runs on the I/O loop's thread.
    public var connectionErrorHandler: (@Sendable (TKError) -> Void)? {
        get { listener.withLock { $0.handler } }
        set { listener.withLock { $0.handler = newValue } }
    }

    public var description: String { "TKSocketPort \(isRemote ? "to " : "")\(address)" }

    /// Refuses a path a live listener serves; removes a socket file nobody listens on.
    private static func clearStaleSocket(_ path: String) throws {
        guard let status = SystemCall.status(path) else { return }
        guard !status.isDirectory, (try? probe(path)) == false else {
            throw TKError(.invalidArgument, "TKSocketPort(unixSocketPath: \"\(path)\"): the path is in use (a directory, a file, or a live listener). "
                          + "Fix: use another path, or invalidate the port listening there.")
        }
        unlink(path)
    }

    /// Whether a listener answers at the Unix socket `path` (throws if the path is not a socket).
    private static func probe(_ path: String) throws -> Bool {
        var inProgress: Int32 = 0
        let fd = tk_unix_connect(path, &inProgress)
        if fd >= 0 { Glibc.close(fd); return true }
        if -fd == ECONNREFUSED { return false }
        throw TKError(.systemCall, "not a socket", errno: -fd)
    }

    // MARK: Remote ports for addresses that arrive over the wire

    private struct WeakPort { weak var port: TKSocketPort? }
    /// One remote port per address while someone holds it, so replies reuse a connection.
    private static let remotes = Protected<[TKSocketAddress: WeakPort]>([:])

    static func remote(for address: TKSocketAddress) -> TKSocketPort {
        remotes.withLock { table in
            if let port = table[address]?.port, port.isValid { return port }
            let port = TKSocketPort(remote: address)
            table[address] = WeakPort(port: port)
            return port
        }
    }

    /// What a port component or reply port carries for `port`, or why it cannot cross processes.
    private static func wireAddress(of port: TKPort) -> TKSocketAddress? {
        (port as? TKSocketPort)?.address
    }

    // MARK: Sending

    override func transmit(_ message: TKPortMessage, before deadline: ContinuousClock.Instant) -> Bool {
        guard isRemote else { return super.transmit(message, before: deadline) }
        guard isValid else {
            message.failureReason = "\(self) is invalid. Fix: create a new port for the remote listener."
            return false
        }
        var frame = PortWireFormat.Frame(msgid: message.msgid, reply: nil, components: [])
        if let reply = message.receivePort {
            guard let address = TKSocketPort.wireAddress(of: reply) else {
                message.failureReason = "the reply port \(reply) is a TKMessagePort, which cannot cross processes. Fix: use a listening TKSocketPort as receivePort."
                return false
            }
            frame.reply = address
        }
        for component in message.components {
            switch component {
            case .data(let bytes): frame.components.append(.data(bytes))
            case .port(let port):
                guard let address = TKSocketPort.wireAddress(of: port) else {
                    message.failureReason = "a port component (\(port)) is a TKMessagePort, which cannot cross processes. Fix: send a TKSocketPort."
                    return false
                }
                frame.components.append(.port(address))
            }
        }
        switch PortWireFormat.encode(frame) {
        case .failure(let error):
            message.failureReason = "message \(message.msgid) cannot be sent through \(self): \(error). Fix: send less data per message."
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
    private func write(_ bytes: [UInt8], before deadline: ContinuousClock.Instant) -> String? {
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

    private func connect(before deadline: ContinuousClock.Instant) -> String? {
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
                return "cannot connect (\(SystemCall.errorName(error))). Fix: start the listener first, or give send(before:) a later deadline."
            }
        }
        remoteFD = fd
        return nil
    }

    private func dropConnection() {
        if remoteFD >= 0 { Glibc.close(remoteFD) }
        remoteFD = -1
    }

    /// A poll(2) timeout covering `duration`, rounded up to whole milliseconds.
    private static func milliseconds(_ duration: Duration) -> Int32 {
        duration.pollMilliseconds
    }

    // MARK: Receiving (the I/O loop's thread)

    override func didSchedule(on loop: TKRunLoop) {
        guard !isRemote else { return }
        listener.withLock { s in
            guard s.poll == nil, s.listenFD >= 0 else { return }
            s.poll = loop.poll
            s.listenToken = loop.poll.watch(s.listenFD, events: 0x1 /* EPOLLIN */, watcher: self)
        }
    }

    private static let readEvents: UInt32 = 0x1 | 0x2000   // EPOLLIN | EPOLLRDHUP

    func descriptorReady(_ fd: Int32, events: UInt32) {
        var reports: [TKError] = []
        let handler = listener.withLock { s -> (@Sendable (TKError) -> Void)? in
            if fd == s.listenFD {
                accept(&s)
            } else if s.connections[fd] != nil {
                read(fd, &s, &reports)
            }
            return s.handler
        }
        for report in reports {
            if let handler { handler(report) } else { TKSocketPort.log(report) }
        }
    }

    private func accept(_ s: inout ListenerState) {
        guard let poll = s.poll else { return }
        while true {
            let fd = tk_accept(s.listenFD)
            guard fd >= 0 else { return }   // EAGAIN: all taken; other errors (EMFILE): retried on the next event
            guard let token = poll.watch(fd, events: TKSocketPort.readEvents, watcher: self) else {
                Glibc.close(fd)
                continue
            }
            s.connections[fd] = Connection(token: token)
        }
    }

    /// Reads what is there (a bounded amount, for fairness with the loop's other work), queues
    /// every complete frame, and closes the connection on EOF, an error or a bad frame.
    private func read(_ fd: Int32, _ s: inout ListenerState, _ reports: inout [TKError]) {
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
            s.connections[fd]!.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
            decoding: while true {
                switch s.connections[fd]!.decoder.next() {
                case .success(let frame?):
                    _ = inbox.push(message(from: frame), deadline: nil)
                case .success(nil):
                    break decoding
                case .failure(let error):
                    closeConnection(fd, &s, &reports, because: error.description)
                    return
                }
            }
            if inbox.isOverLimit {
                // Stop reading until the loop delivers: the kernel's buffers, then the sender, wait.
                s.connections[fd]!.paused = true
                s.poll?.modify(s.connections[fd]!.token, events: 0)
                return
            }
        }
    }

    private func message(from frame: PortWireFormat.Frame) -> TKPortMessage {
        let components = frame.components.map { component -> TKPortMessage.Component in
            switch component {
            case .data(let bytes): return .data(bytes)
            case .port(let address): return .port(TKSocketPort.remote(for: address))
            }
        }
        return TKPortMessage(sendPort: frame.reply.map(TKSocketPort.remote(for:)), receivePort: self,
                             components: components, msgid: frame.msgid)
    }

    /// Closes an accepted connection; a reason (nil: the peer simply hung up) is reported.
    private func closeConnection(_ fd: Int32, _ s: inout ListenerState, _ reports: inout [TKError], because reason: String?) {
        guard let connection = s.connections.removeValue(forKey: fd) else { return }
        s.poll?.unwatch(connection.token)
        Glibc.close(fd)
        if let reason { reports.append(TKError(.protocolViolation, "\(self) closed a connection: \(reason)")) }
    }

    private func resumePausedConnections() {
        listener.withLock { s in
            for (fd, connection) in s.connections where connection.paused {
                s.connections[fd]!.paused = false
                s.poll?.modify(connection.token, events: TKSocketPort.readEvents)
            }
        }
    }

    private static func log(_ error: TKError) {
        var line = "ThreadKit: \(error.message)\n"
        line.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }

    // MARK: Invalidation

    override func didInvalidate() {
        closeEverything()
    }

    private func closeEverything() {
        listener.withLock { s in
            for (fd, connection) in s.connections {
                s.poll?.unwatch(connection.token)
                Glibc.close(fd)
            }
            s.connections.removeAll()
            if s.listenFD >= 0 {
                if let token = s.listenToken { s.poll?.unwatch(token) }
                Glibc.close(s.listenFD)
                s.listenFD = -1
                if case .unix(let path) = address { unlink(path) }
            }
        }
        sender.withLock { dropConnection() }
    }
}
