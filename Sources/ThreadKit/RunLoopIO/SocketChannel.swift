// SocketChannel: the TCP socket shared by the two streams of a connection (docs/RunLoopIO.md,
// "Streams"): name resolution off the loop thread, a non-blocking connect to each address in
// turn, one epoll registration per loop carrying what the streams scheduled there want, and the
// blocking waits of unscheduled streams.
//
// Opening, step by step:
//   1. the first `open()` of either stream calls `start()`: phase resolving;
//   2. a numeric host resolves at once; a name on a TKThread of its own (getaddrinfo may block);
//   3. `connect(addresses)`: a non-blocking connect per address until one is under way (phase
//      connecting) or done (phase open); none: phase failed;
//   4. connecting: the loops holding a stream wait for writability (registrations armed for
//      EPOLLOUT), unscheduled readers and writers wait in poll(2); whoever sees it calls
//      `connectFinished`, which reads SO_ERROR: 0 → open, else the next address (step 3);
//   5. open: each opened stream gets `opened()` (openCompleted, then its first event is armed).
//
// Threads: any. `mutex` guards every field below it; `changed` is broadcast on each phase change
// (blocking waiters of step 2). Streams are called back with the mutex released (the `Notices`
// collected under it). Lock order: mutex, then EventPoll's table (inside DescriptorRegistration).
import CThreadKit
import Glibc

// safety: the phase, descriptor, sides and memberships are touched only under `mutex`; `host`
// and `port` are immutable.
final class SocketChannel: @unchecked Sendable {
    enum Side { case input, output }

    enum Phase {
        case idle
        case resolving
        case connecting(rest: ArraySlice<SocketAddress>)
        case open
        case failed(TKError)
        case closed
    }

    struct SocketAddress {
        var storage: sockaddr_storage
        var length: UInt32
    }

    private struct Member {
        weak var loop: TKRunLoop?
        var registration: DescriptorRegistration?
        var sides: Set<Side> = []
    }

    /// What to tell the streams once the mutex is released.
    private struct Notices {
        var opened: [Side] = []
        var failed: [(Side, TKError)] = []
        var ready: [Side] = []
    }

    let mutex = RawMutex()
    private let changed = RawCondition()
    private let host: String
    private let port: UInt16
    private var phase = Phase.idle
    /// The socket: connecting or open; -1 otherwise.
    private(set) var fd: Int32 = -1
    private weak var input: TKInputStream?
    private weak var output: TKOutputStream?
    /// Streams that called `open()` and wait for the outcome.
    private var opening: Set<Side> = []
    private var wantRead = false
    private var wantWrite = false
    private var closedSides: Set<Side> = []
    private var members: [ObjectIdentifier: Member] = [:]
    private var lastError: Int32 = ECONNREFUSED

    /// A connection to be made to `host`:`port` by the first `open()`.
    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// A connection that can never open (bad arguments): `open()` reports `error`.
    init(failed error: TKError) {
        host = "nowhere"
        port = 0
        phase = .failed(error)
    }

    /// A connected socket (owned from now on).
    init(connected fd: Int32) {
        host = "connected socket \(fd)"
        port = 0
        self.fd = fd
        phase = .open
        _ = tk_set_nonblocking_cloexec(fd)
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
    }

    func attach(input: TKInputStream, output: TKOutputStream) {
        locked {
            self.input = input
            self.output = output
        }
    }

    private func locked<T>(_ body: () -> T) -> T { mutex.withLock(body) }

    // MARK: Opening

    /// A stream opened: start connecting (first time), or tell it at once if already decided.
    func open(_ side: Side) {
        var notices = Notices()
        var start = false
        locked {
            switch phase {
            case .idle:
                phase = .resolving
                opening.insert(side)
                start = true
            case .resolving, .connecting:
                opening.insert(side)
            case .open:
                notices.opened.append(side)
            case .failed(let error):
                notices.failed.append((side, error))
            case .closed:
                notices.failed.append((side, closedError))
            }
        }
        deliver(notices)
        if start { resolve() }
    }

    private var closedError: TKError {
        TKError(.invalidArgument, "TKStream to \(host):\(port): the connection was closed. Fix: open a new pair of streams.")
    }

    private func resolve() {
        // A numeric host needs no lookup: connect from here.
        if let addresses = SocketChannel.addresses(host, port, numericOnly: true).success {
            connect(addresses[...])
            return
        }
        let thread = TKThread(name: "TKStream resolver") { [self] in
            switch SocketChannel.addresses(host, port, numericOnly: false) {
            case .success(let addresses): connect(addresses[...])
            case .failure(let error): fail(error)
            }
        }
        thread.start()
    }

    private static func addresses(_ host: String, _ port: UInt16, numericOnly: Bool) -> Result<[SocketAddress], TKError> {
        var storage = [sockaddr_storage](repeating: sockaddr_storage(), count: 8)
        var lengths = [UInt32](repeating: 0, count: 8)
        var gai: Int32 = 0
        let count = tk_resolve_addresses(host, port, numericOnly ? 1 : 0, &storage, &lengths, 8, &gai)
        guard count > 0 else {
            let reason = gai != 0 ? String(cString: gai_strerror(gai)) : "no address"
            return .failure(
                TKError(
                    .invalidArgument,
                    "TKStream.getStreamsToHost(withName: \"\(host)\", port: \(port)): the name does not resolve "
                        + "(\(reason)). Fix: check the host name, or use an address such as 127.0.0.1."))
        }
        return .success((0..<Int(count)).map { SocketAddress(storage: storage[$0], length: lengths[$0]) })
    }

    /// Step 3: starts a connect to the first address that takes one.
    private func connect(_ addresses: ArraySlice<SocketAddress>) {
        var notices = Notices()
        locked {
            guard case .resolving = phase else { return }
            startConnect(addresses, &notices)
        }
        deliver(notices)
    }

    /// Caller holds the mutex; phase is resolving or connecting (the previous socket closed).
    private func startConnect(_ addresses: ArraySlice<SocketAddress>, _ notices: inout Notices) {
        var rest = addresses
        while let address = rest.popFirst() {
            var inProgress: Int32 = 0
            var storage = address.storage
            let result = tk_connect_address(&storage, address.length, &inProgress)
            if result < 0 {
                lastError = -result
                continue
            }
            fd = result
            for key in members.keys { members[key]!.registration = nil }
            if inProgress != 0 {
                phase = .connecting(rest: rest)
                armAll()
            } else {
                becomeOpen(&notices)
            }
            changed.broadcast()
            return
        }
        failLocked(TKError(.systemCall, "TKStream to \(host):\(port): cannot connect", errno: lastError), &notices)
    }

    /// Step 4: the socket `socket` became writable (or failed) while connecting.
    func connectFinished(_ socket: Int32) {
        var notices = Notices()
        locked {
            guard case .connecting(let rest) = phase, fd == socket else { return }
            let error = tk_socket_error(socket)
            if error == 0 {
                becomeOpen(&notices)
                changed.broadcast()
                return
            }
            lastError = error
            dropSocket()
            startConnect(rest, &notices)
        }
        deliver(notices)
    }

    /// Caller holds the mutex.
    private func becomeOpen(_ notices: inout Notices) {
        phase = .open
        notices.opened.append(contentsOf: opening)
        opening.removeAll()
        armAll()
    }

    private func fail(_ error: TKError) {
        var notices = Notices()
        locked { failLocked(error, &notices) }
        deliver(notices)
    }

    /// Caller holds the mutex.
    private func failLocked(_ error: TKError, _ notices: inout Notices) {
        mutex.assertHeld("SocketChannel.mutex")
        if case .closed = phase { return }
        dropSocket()
        phase = .failed(error)
        for side in opening { notices.failed.append((side, error)) }
        opening.removeAll()
        changed.broadcast()
    }

    /// Caller holds the mutex.
    private func dropSocket() {
        for key in members.keys {
            members[key]!.registration?.cancel()
            members[key]!.registration = nil
        }
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    private func deliver(_ notices: Notices) {
        let (input, output) = locked { (self.input, self.output) }
        func stream(_ side: Side) -> TKStream? { side == .input ? input : output }
        for side in notices.opened { stream(side)?.opened() }
        for (side, error) in notices.failed { stream(side)?.failed(error) }
        for side in notices.ready {
            stream(side)?.post(side == .input ? .hasBytesAvailable : .hasSpaceAvailable)
        }
    }

    // MARK: Loops and readiness

    func joined(_ loop: TKRunLoop, _ side: Side) {
        locked {
            let key = ObjectIdentifier(loop)
            if members[key]?.loop == nil { members[key] = Member(loop: loop) }
            members[key]!.sides.insert(side)
            arm(key)
        }
    }

    func left(_ loop: TKRunLoop, _ side: Side) {
        locked {
            let key = ObjectIdentifier(loop)
            guard members[key] != nil else { return }
            members[key]!.sides.remove(side)
            if members[key]!.sides.isEmpty {
                members[key]!.registration?.cancel()
                members.removeValue(forKey: key)
            }
        }
    }

    /// One-shot: the input wants `hasBytesAvailable` (or the output `hasSpaceAvailable`).
    func arm(_ side: Side) {
        locked {
            if side == .input { wantRead = true } else { wantWrite = true }
            for (key, member) in members where member.sides.contains(side) { arm(key) }
        }
    }

    /// Arms every loop's registration. Caller holds the mutex.
    private func armAll() {
        for key in members.keys { arm(key) }
    }

    /// Arms the registration of one loop for what its streams want now. Caller holds the mutex.
    private func arm(_ key: ObjectIdentifier) {
        guard fd >= 0, var member = members[key], let loop = member.loop else { return }
        var interest: UInt32 = 0
        switch phase {
        case .connecting: interest = EpollBits.writeInterest
        case .open:
            if wantRead && member.sides.contains(.input) { interest |= EpollBits.readInterest }
            if wantWrite && member.sides.contains(.output) { interest |= EpollBits.writeInterest }
        default: return
        }
        if member.registration == nil {
            member.registration = DescriptorRegistration(fd: fd, loop: loop, handler: self)
            members[key] = member
        }
        _ = member.registration!.arm(interest)
    }

    // MARK: Transfers (blocking as NSStream's)

    /// Waits until the connection is open (the socket) or decided against (the error).
    func waitOpen() -> Result<Int32, TKError> {
        while true {
            let tid = mutex.lockInternal()
            switch phase {
            case .open:
                let socket = fd
                mutex.unlockInternal(tid)
                return .success(socket)
            case .failed(let error):
                mutex.unlockInternal(tid)
                return .failure(error)
            case .closed, .idle:
                mutex.unlockInternal(tid)
                return .failure(closedError)
            case .resolving:
                _ = changed.wait(mutex, tid, deadline: nil)
                mutex.unlockInternal(tid)
            case .connecting:
                let socket = fd
                mutex.unlockInternal(tid)
                // Bounded, so a socket replaced by another thread meanwhile is noticed.
                if tk_poll1(socket, Int16(TK_POLLOUT), 100) > 0 { connectFinished(socket) }
            }
        }
    }

    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer {
        let socket: Int32
        switch waitOpen() {
        case .success(let s): socket = s
        case .failure(let error): return .failure(error)
        }
        while true {
            let n = tk_recv(socket, buffer, length)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .end }
            if n == -Int(EAGAIN) {
                guard locked({ !closedSides.contains(.input) }) else { return .failure(closedError) }
                _ = tk_poll1(socket, Int16(TK_POLLIN | TK_POLLRDHUP), 1_000)
                continue
            }
            return .failure(TKError(.systemCall, "TKInputStream from \(host):\(port): reading failed", errno: Int32(-n)))
        }
    }

    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer {
        let socket: Int32
        switch waitOpen() {
        case .success(let s): socket = s
        case .failure(let error): return .failure(error)
        }
        while true {
            let n = tk_send(socket, buffer, length)
            if n > 0 { return .bytes(n) }
            if n == -Int(EAGAIN) {
                guard locked({ !closedSides.contains(.output) }) else { return .failure(closedError) }
                _ = tk_poll1(socket, Int16(TK_POLLOUT), 1_000)
                continue
            }
            return .failure(TKError(.systemCall, "TKOutputStream to \(host):\(port): writing failed", errno: Int32(-n)))
        }
    }

    var hasBytesAvailable: Bool {
        let socket = locked { if case .open = phase { return fd } else { return -1 } }
        return socket >= 0 && tk_poll1(socket, Int16(TK_POLLIN | TK_POLLRDHUP), 0) > 0
    }

    var hasSpaceAvailable: Bool {
        let socket = locked { if case .open = phase { return fd } else { return -1 } }
        return socket >= 0 && tk_poll1(socket, Int16(TK_POLLOUT), 0) > 0
    }

    /// A stream closed (or was released). The socket closes with the second.
    func close(_ side: Side) {
        locked {
            guard closedSides.insert(side).inserted else { return }
            opening.remove(side)
            if side == .input { wantRead = false } else { wantWrite = false }
            guard closedSides.count == 2 else { return }
            dropSocket()
            members.removeAll()
            phase = .closed
            changed.broadcast()
        }
    }
}

extension SocketChannel: ReadinessHandler {
    func descriptorReady(_ registration: DescriptorRegistration, events: UInt32) {
        var notices = Notices()
        var connected: Int32?
        locked {
            registration.disarmed()
            guard registration.fd == fd,
                let key = members.first(where: { $0.value.registration === registration })?.key
            else { return }
            switch phase {
            case .connecting:
                connected = fd
            case .open:
                let sides = members[key]!.sides
                if wantRead && sides.contains(.input) && events & (EpollBits.readInterest | EpollBits.failure) != 0 {
                    wantRead = false
                    notices.ready.append(.input)
                }
                if wantWrite && sides.contains(.output) && events & (EpollBits.writeInterest | EpollBits.failure) != 0 {
                    wantWrite = false
                    notices.ready.append(.output)
                }
                arm(key)
            default:
                break
            }
        }
        if let connected { connectFinished(connected) }
        deliver(notices)
    }
}

extension Result {
    var success: Success? { if case .success(let value) = self { return value } else { return nil } }
}

/// The socket sides of a stream pair.
final class SocketInput: InputSide, Sendable {
    let channel: SocketChannel
    init(_ channel: SocketChannel) { self.channel = channel }
    func open(_ stream: TKInputStream) { channel.open(.input) }
    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer { channel.read(buffer, length) }
    func arm(_ stream: TKInputStream) { channel.arm(.input) }
    var hasBytesAvailable: Bool { channel.hasBytesAvailable }
    func close() { channel.close(.input) }
    func joined(_ loop: TKRunLoop) { channel.joined(loop, .input) }
    func left(_ loop: TKRunLoop) { channel.left(loop, .input) }
}

final class SocketOutput: OutputSide, Sendable {
    let channel: SocketChannel
    init(_ channel: SocketChannel) { self.channel = channel }
    func open(_ stream: TKOutputStream) { channel.open(.output) }
    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer { channel.write(buffer, length) }
    func arm(_ stream: TKOutputStream) { channel.arm(.output) }
    var hasSpaceAvailable: Bool { channel.hasSpaceAvailable }
    func close() { channel.close(.output) }
    func joined(_ loop: TKRunLoop) { channel.joined(loop, .output) }
    func left(_ loop: TKRunLoop) { channel.left(loop, .output) }
}
