// TKSocketPort: ports between processes (NSSocketPort's role), over TCP or Unix sockets, with the
// frames of PortWireFormat.swift (docs/Ports.md). This file: creating ports, their settings, the
// table of remote ports and invalidation; sending is in TKSocketPort+Sending.swift, receiving in
// TKSocketPort+Receiving.swift, peer credentials in TKSocketPort+Peers.swift.
//
// Two kinds, fixed at init:
//   - a listening port (init(tcpPort:), init(unixSocketPath:)) receives. Its listening socket and
//     the connections it accepts live in the epoll set of the first run loop it joins (the "I/O
//     loop"); that loop's thread accepts, reads and decodes (EventPoll's descriptor watchers), and
//     every loop holding the port delivers through TKPort's inbox, as for TKMessagePort.
//   - a remote port (init(remoteHost:port:), init(unixSocketPath:remote: true)) sends. The
//     sending thread connects on first use and writes whole frames under `sender`. Until then it
//     holds no descriptor and no buffer, so the remote ports made for addresses that arrive in
//     messages cost little, and the table of them forgets those nobody holds.
// Locks: `listener` guards the listening state (descriptors, decoders, paused connections); it is
// taken by the I/O loop thread, by `invalidate()` and by the inbox's drain hook, never while a
// loop lock is held, and the inbox lock, the remote-port table and another port's `security` are
// taken inside it (lock order: listener, then those leaves). `security` (authenticator, peer rule)
// is a leaf. Handlers (`connectionErrorHandler`, a custom peer rule) run with no lock held, and
// so are the retry timers (descriptors, the unfinished-frame budget) added to the I/O loop.
// `sender` guards the remote connection and is held across a blocking write, so frames from
// different threads never interleave.
import CThreadKit
import Glibc
import Synchronization

// safety: the listener and security state are `Protected`; `remoteFD` is touched only under
// `sender`, `readBuffer`'s bytes only under `listener`; the rest is immutable.
/// A port that carries messages between processes over a TCP connection on loopback (or to
/// another host), or over a Unix socket.
public final class TKSocketPort: TKPort, @unchecked Sendable, CustomStringConvertible, DescriptorWatcher {
    /// How many received, undelivered messages a listening port holds before it stops reading
    /// (the senders then wait in the kernel's socket buffers).
    public static let defaultQueueLimit = 65_536
    /// The file mode of a listening Unix socket unless `init(unixSocketPath:permissions:)` says
    /// otherwise: read and write for the owner only, whatever the umask.
    public static let defaultUnixSocketPermissions: mode_t = 0o600

    /// Where the port listens (a listening port) or what it reaches (a remote port).
    public let address: TKSocketAddress
    /// True for the sending end of a remote listener.
    public let isRemote: Bool

    struct Connection {
        let token: UInt64
        var decoder = PortWireFormat.Decoder()
        /// Not read until the loop delivers (the inbox is over its limit).
        var paused = false
        /// Not read until the budget has room (an authenticating port; the retry timer checks).
        var waitingForBudget = false
        /// Bytes of the process's unfinished-frame budget this connection holds (at least its
        /// decoder's `heldByteCount` and `chargeFloor`).
        var charged = 0
    }

    struct ListenerState {
        var listenFD: Int32 = -1
        /// The I/O loop's poll, set when the port first joins a loop.
        var poll: EventPoll?
        var listenToken: UInt64?
        var connections: [Int32: Connection] = [:]
        var handler: (@Sendable (TKError) -> Void)?
        /// Out of descriptors: the listening socket is not watched until the retry timer fires.
        var acceptPaused = false
        /// A budget retry timer is pending (or wanted: `budgetTimerWanted`, added once the lock
        /// is released) for connections waiting for the budget.
        var budgetRetryScheduled = false
        var budgetTimerWanted = false
    }

    struct Security {
        var authenticator: TKSocketPortAuthenticator?
        var allowedPeers: PeerRule = .sameUser
    }

    let listener = Protected(ListenerState())
    let security = Protected(Security())
    /// The connection of a remote port, -1 when none. Guarded by `sender`.
    var remoteFD: Int32 = -1
    let sender = RawMutex()
    /// Read buffer of the I/O loop, for listening ports only (a remote port never reads).
    /// Guarded by `listener`.
    let readBuffer: UnsafeMutableRawBufferPointer?

    // MARK: Creating ports

    /// Listens on 127.0.0.1 at `tcpPort` (0: any free port; see `localPort`). Any local user can
    /// connect: set an `authenticator` to accept only messages from key holders (docs/Ports.md).
    public convenience init(tcpPort: UInt16) throws {
        var bound: UInt16 = 0
        var gai: Int32 = 0
        let fd = tk_tcp_listen("127.0.0.1", tcpPort, &bound, &gai)
        guard fd >= 0 else {
            let fix =
                -fd == EADDRINUSE
                ? "Fix: pick another port, or 0 for any free one." : "Fix: check the port number and the process's limits."
            throw TKError(.systemCall, "TKSocketPort(tcpPort: \(tcpPort)) cannot listen on 127.0.0.1:\(tcpPort). \(fix)", errno: -fd)
        }
        self.init(listening: fd, address: .tcp(host: "127.0.0.1", port: bound))
    }

    /// The sending end for a listener at `remoteHost`:`port`. The host must resolve; the
    /// connection is made by the first send.
    public convenience init(remoteHost: String, port: UInt16) throws {
        guard port != 0 else {
            throw TKError(
                .invalidArgument,
                "TKSocketPort(remoteHost: \(remoteHost), port: 0): port 0 cannot be reached. Fix: use the listener's localPort.")
        }
        let gai = tk_resolve(remoteHost)
        guard !remoteHost.isEmpty, gai == 0 else {
            throw TKError(
                .invalidArgument,
                "TKSocketPort(remoteHost: \"\(remoteHost)\", port: \(port)): the host does not resolve"
                    + "\(gai == 0 ? "" : " (\(String(cString: gai_strerror(gai))))"). Fix: use an address such as 127.0.0.1 or a known host name."
            )
        }
        self.init(remote: .tcp(host: remoteHost, port: port))
    }

    /// Listens on the Unix socket at `path`, owner-only (`defaultUnixSocketPermissions`). A stale
    /// socket file left by a process that is gone is replaced; a path another listener serves is
    /// refused. Connections from other users are refused (`allowedPeers`).
    public convenience init(unixSocketPath path: String) throws {
        try self.init(unixSocketPath: path, remote: false)
    }

    /// With `remote` false, listens on the Unix socket at `path` (as `init(unixSocketPath:)`);
    /// with true, the sending end for the listener there (connected by the first send).
    public convenience init(unixSocketPath path: String, remote: Bool) throws {
        if remote {
            try TKSocketPort.checkUnixPath(path)
            self.init(remote: .unix(path: path))
        } else {
            try self.init(unixSocketPath: path, permissions: TKSocketPort.defaultUnixSocketPermissions)
        }
    }

    /// Listens on the Unix socket at `path`, its file given `permissions` (e.g. 0o660 to let the
    /// group connect; the umask plays no part). Who may send is still decided by `allowedPeers`.
    public convenience init(unixSocketPath path: String, permissions: mode_t) throws {
        try TKSocketPort.checkUnixPath(path)
        guard permissions & ~0o777 == 0 else {
            throw TKError(
                .invalidArgument,
                "TKSocketPort(unixSocketPath: \"\(path)\", permissions: 0o\(String(permissions, radix: 8))): "
                    + "only permission bits (0o777) may be given. Fix: pass e.g. 0o600 or 0o660.")
        }
        try TKSocketPort.clearStaleSocket(path)
        let fd = tk_unix_listen(path, UInt32(permissions))
        guard fd >= 0 else {
            let fix = -fd == ENOENT ? "Fix: create the directory first." : "Fix: check the path and its directory's permissions."
            throw TKError(.systemCall, "TKSocketPort(unixSocketPath: \"\(path)\") cannot listen there. \(fix)", errno: -fd)
        }
        self.init(listening: fd, address: .unix(path: path))
    }

    private static func checkUnixPath(_ path: String) throws {
        guard !path.isEmpty, path.utf8.count < 108 else {
            throw TKError(
                .invalidArgument,
                "TKSocketPort(unixSocketPath: \"\(path)\"): a Unix socket path must have 1 to 107 bytes. Fix: use a shorter path, e.g. in /tmp."
            )
        }
    }

    private init(listening fd: Int32, address: TKSocketAddress) {
        self.address = address
        isRemote = false
        readBuffer = .allocate(byteCount: 64 << 10, alignment: 8)
        super.init(inboxLimit: TKSocketPort.defaultQueueLimit)
        listener.withLock { $0.listenFD = fd }
        // Set before the port is shared; called by the delivering loop after it took a batch.
        inbox.onDrained = { [weak self] in self?.resumePausedConnections() }
    }

    private init(remote address: TKSocketAddress) {
        self.address = address
        isRemote = true
        readBuffer = nil
        super.init(inboxLimit: 1)
    }

    deinit {
        // An invalidated port has closed everything already; a dropped valid one closes here.
        closeEverything()
        readBuffer?.deallocate()
    }

    /// The TCP port a listening TCP port is bound to; nil for remote and Unix-socket ports.
    public var localPort: UInt16? {
        if !isRemote, case .tcp(_, let port) = address { return port }
        return nil
    }

    /// Told when a connection is closed because of what came over it (malformed, truncated,
    /// oversized or unauthenticated frames, a peer the rule refuses, the unfinished-frame budget
    /// of a port without an authenticator, a message bigger than the whole budget, read errors).
    /// Default: a line on standard error. Runs on the I/O loop's thread.
    public var connectionErrorHandler: (@Sendable (TKError) -> Void)? {
        get { listener.withLock { $0.handler } }
        set { listener.withLock { $0.handler = newValue } }
    }

    /// Signs what a remote port sends; verifies what a listening port receives (nil: neither).
    /// A listening port with one refuses every segment it does not verify, before keeping its
    /// data, and reads at most a small first segment (2,071 bytes) of a message before it has
    /// verified it; its connections wait for the unfinished-frame budget instead of being closed.
    /// The remote ports made for a reply port or port components of a message that passed it
    /// sign with it too, unless they have their own.
    public var authenticator: TKSocketPortAuthenticator? {
        get { security.withLock { $0.authenticator } }
        set { security.withLock { $0.authenticator = newValue } }
    }

    /// Which processes a listening Unix-socket port accepts connections from, checked with the
    /// credentials the kernel records at connect (SO_PEERCRED). Default `.sameUser`. TCP ports
    /// cannot tell who connects: use an `authenticator` there.
    public var allowedPeers: PeerRule {
        get { security.withLock { $0.allowedPeers } }
        set { security.withLock { $0.allowedPeers = newValue } }
    }

    /// Gives this port `authenticator` unless it has one (remote ports met in authenticated messages).
    func adopt(_ authenticator: TKSocketPortAuthenticator) {
        security.withLock { if $0.authenticator == nil { $0.authenticator = authenticator } }
    }

    /// The port and its ``address``: `TKSocketPort tcp HOST:PORT` or `TKSocketPort unix PATH` for a
    /// listening port, `TKSocketPort to tcp HOST:PORT` (or `to unix PATH`) for a sending end.
    public var description: String { "TKSocketPort \(isRemote ? "to " : "")\(address)" }

    /// Refuses a path a live listener serves; removes a socket file nobody listens on.
    private static func clearStaleSocket(_ path: String) throws {
        guard let status = SystemCall.status(path) else { return }
        guard !status.isDirectory, (try? probe(path)) == false else {
            throw TKError(
                .invalidArgument,
                "TKSocketPort(unixSocketPath: \"\(path)\"): the path is in use (a directory, a file, or a live listener). "
                    + "Fix: use another path, or invalidate the port listening there.")
        }
        unlink(path)
    }

    /// Whether a listener answers at the Unix socket `path` (throws if the path is not a socket).
    private static func probe(_ path: String) throws -> Bool {
        var inProgress: Int32 = 0
        let fd = tk_unix_connect(path, &inProgress)
        if fd >= 0 {
            Glibc.close(fd)
            return true
        }
        if -fd == ECONNREFUSED { return false }
        throw TKError(.systemCall, "not a socket", errno: -fd)
    }

    // MARK: The process-wide budget for unfinished frames

    /// The most bytes all listening socket ports of this process together hold for frames still
    /// arriving (default 256 MiB), so many peers each sending part of a big frame cannot exhaust
    /// memory. On a port without an authenticator, a connection whose next read would take the
    /// total past it is closed and reported. On a port with one, such a connection stops being
    /// read until there is room (its sender waits, nothing is lost); only a message that could
    /// never fit (its size plus 256 KiB over the whole budget) closes it. A budget under 64 MiB
    /// also refuses the biggest frames. Must not be negative.
    public static var unfinishedFrameBudget: Int {
        get { UnfinishedFrameBudget.limit }
        set { UnfinishedFrameBudget.setLimit(newValue) }
    }

    /// The bytes held now for unfinished frames, in all listening ports of the process.
    public static var unfinishedFrameBytes: Int { UnfinishedFrameBudget.held }

    // MARK: Remote ports for addresses that arrive over the wire

    private struct WeakPort { weak var port: TKSocketPort? }
    private struct RemoteTable {
        var ports: [TKSocketAddress: WeakPort] = [:]
        /// When the table reaches this size it forgets the ports nobody holds (amortized O(1)).
        var sweepAt = 64
    }
    /// One remote port per address while someone holds it, so replies reuse a connection.
    private static let remotes = Protected(RemoteTable())

    static func remote(for address: TKSocketAddress) -> TKSocketPort {
        remotes.withLock { table in
            if let port = table.ports[address]?.port, port.isValid { return port }
            if table.ports.count >= table.sweepAt {
                table.ports = table.ports.filter { $0.value.port?.isValid == true }
                table.sweepAt = max(64, 2 * table.ports.count)
            }
            let port = TKSocketPort(remote: address)
            table.ports[address] = WeakPort(port: port)
            return port
        }
    }

    /// Entries in the table of remote ports (for tests: it must not grow with every address seen).
    static var remoteTableCount: Int { remotes.withLock { $0.ports.count } }

    // MARK: Overrides (an extension cannot override: the work is in the +Sending/+Receiving files)

    override func transmit(_ message: TKPortMessage, before deadline: ContinuousClock.Instant) -> Bool {
        isRemote ? transmitRemote(message, before: deadline) : super.transmit(message, before: deadline)
    }

    override func didSchedule(on loop: TKRunLoop) {
        if !isRemote { startListening(on: loop) }
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
                UnfinishedFrameBudget.release(connection.charged)
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
