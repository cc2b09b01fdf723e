// IOBenchmarks: byte streams over loopback TCP on a run loop. ThreadKit's TKStream pair on a
// TKRunLoop thread against a SwiftNIO channel on an event loop and Foundation.
// Foundation on Linux has no socket streams (`Stream.getStreamsToHost` and `getBoundStreams` do
// not exist there), and its run-loop way to hear a socket, `FileHandle.readInBackgroundAndNotify`,
// never wakes a sleeping RunLoop (its notification waits for some other event; this benchmark
// hung on it). So Foundation's contender is the one asynchronous socket read that works there:
// `FileHandle.readabilityHandler` (run on a Dispatch queue), with `FileHandle.write` (blocking).
//   - echo round trip, 64 B: the contender is the client; its peer is a plain blocking echo thread;
//   - echo round trip beside 0, 1,000 and 10,000 idle connections on the client's loop: ThreadKit
//     only, against itself (a pass must cost what is ready, not what exists);
//   - echo server round trip, 64 B: the contender serves; its peer is a plain blocking client
//     (this driver thread);
//   - bulk send and bulk receive, 64 MiB per measurement in 64 KiB chunks: the peer is a blocking
//     thread that reads (and counts) or writes exactly what was asked.
// Every contender has its own connection, made once; measurements reuse it.
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import ThreadKit

/// Plain POSIX loopback sockets for the peers (independent of every contender).
enum Loopback {
    static func listener() -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                precondition(bind(fd, sa, len) == 0 && listen(fd, 128) == 0 && getsockname(fd, sa, &len) == 0)
            }
        }
        return (fd, UInt16(bigEndian: addr.sin_port))
    }

    static func connect(port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = port.bigEndian
        let rc = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(rc == 0, "connect: errno \(errno)")
        noDelay(fd)
        return fd
    }

    static func accept(_ listener: Int32) -> Int32 {
        let fd = Glibc.accept(listener, nil, nil)
        precondition(fd >= 0, "accept: errno \(errno)")
        noDelay(fd)
        return fd
    }

    static func noDelay(_ fd: Int32) {
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) {
        var sent = 0
        while sent < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + sent, bytes.count - sent)
            precondition(n > 0, "write: errno \(errno)")
            sent += n
        }
    }

    static func readExactly(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) {
        var got = 0
        while got < buffer.count {
            let n = Glibc.read(fd, buffer.baseAddress! + got, buffer.count - got)
            precondition(n > 0, "read: errno \(errno)")
            got += n
        }
    }
}

/// A blocking peer thread on one connection: echoes, or counts what it reads, or writes what
/// it is asked to.
final class BlockingPeer: @unchecked Sendable {
    enum Role { case echo, sink, source }
    let fd: Int32
    /// sink: bytes read so far; `target` and `done` tell the driver when a measurement's bytes
    /// all arrived. source: `target` bytes are written after each `request`.
    let received = Atomic<Int>(0)
    let target = Atomic<Int>(Int.max)
    let done = DispatchSemaphore(value: 0)
    private let request = DispatchSemaphore(value: 0)

    init(fd: Int32, role: Role) {
        self.fd = fd
        let thread = Thread { [self] in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
            buffer.initializeMemory(as: UInt8.self, repeating: 7)
            switch role {
            case .echo:
                while true {
                    let n = Glibc.read(fd, buffer.baseAddress!, buffer.count)
                    if n <= 0 { return }
                    Loopback.writeAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                }
            case .sink:
                while true {
                    let n = Glibc.read(fd, buffer.baseAddress!, buffer.count)
                    if n <= 0 { return }
                    let total = received.add(n, ordering: .relaxed).newValue
                    let goal = target.load(ordering: .relaxed)
                    if total >= goal && target.compareExchange(expected: goal, desired: .max, ordering: .relaxed).exchanged {
                        done.signal()
                    }
                }
            case .source:
                while true {
                    request.wait()
                    var left = target.load(ordering: .relaxed)
                    while left > 0 {
                        let n = Glibc.write(fd, buffer.baseAddress!, min(left, buffer.count))
                        if n <= 0 { return }
                        left -= n
                    }
                }
            }
        }
        thread.start()
    }

    /// sink: `bytes` more than it has read so far are coming (called while the peer is idle,
    /// before they are sent); `awaitSunk()` returns once they all arrived.
    func expect(_ bytes: Int) {
        target.store(received.load(ordering: .relaxed) + bytes, ordering: .relaxed)
    }

    func awaitSunk() { done.wait() }

    /// source: writes `bytes` now.
    func send(_ bytes: Int) {
        target.store(bytes, ordering: .relaxed)
        request.signal()
    }
}

let ioMessage = 64
let ioChunk = 1 << 16
let mebibyte = 1 << 20

enum IOBenchmarks {
    static func rows() -> [Row] {
        let tk = BenchLoop()
        let nio = RunLoopBenchmarks.group.next()
        return [
            echoClient(tk, nio), echoBesideIdleConnections(), echoServer(tk, nio),
            bulkSend(tk, nio), bulkReceive(tk, nio),
        ]
    }

    /// Each contender's client, connected over loopback to a blocking peer of its own.
    static func clients(_ tk: BenchLoop, _ nio: any EventLoop, peers role: BlockingPeer.Role)
        -> (TKClient, BlockingPeer, NIOClient, BlockingPeer, FileHandleClient, BlockingPeer)
    {
        let (listener, port) = Loopback.listener()
        defer { close(listener) }
        let tkClient = TKClient(loop: tk.loop, port: port)
        let tkPeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        tkClient.awaitOpen()
        let nioClient = NIOClient(loop: nio, port: port)
        let nioPeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        let fdClient = FileHandleClient(fd: Loopback.connect(port: port))
        let fdPeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        return (tkClient, tkPeer, nioClient, nioPeer, fdClient, fdPeer)
    }

    // MARK: rows

    static func echoClient(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let (tkClient, _, nioClient, _, fdClient, _) = clients(tk, nio, peers: .echo)
        return Row(
            group: "io", name: "echo round trip, 64 B (client on the loop, blocking echo peer)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKStream on TKRunLoop") { n in tkClient.echo(n) },
                Contender(name: "NIO channel") { n in nioClient.echo(n) },
                Contender(name: "Foundation FileHandle.readabilityHandler") { n in fdClient.echo(n) },
            ], reference: "NIO channel", target: "≤ 1.0× NIO")
    }

    /// The echo client of the row above, alone on its loop and beside 1,000 and 10,000 idle
    /// connections scheduled on the same loop (each a stream pair on one end of a socketpair that
    /// nobody writes to). A pass costs what is ready, not what exists: the target is that 10,000
    /// idle connections keep ≥ 0.8× the events per second of the flat loop (≤ 1.25× its time per
    /// round trip; one round trip = one hasBytesAvailable event).
    static func echoBesideIdleConnections() -> Row {
        let counts = [0, 1_000, 10_000]
        raiseDescriptorLimit(to: counts.reduce(0, +) + 1_024)
        let (listener, port) = Loopback.listener()
        defer { close(listener) }
        let contenders = counts.map { count -> Contender in
            let loop = BenchLoop()
            let idle = IdleConnections(count, on: loop.loop)
            let client = TKClient(loop: loop.loop, port: port)
            _ = BlockingPeer(fd: Loopback.accept(listener), role: .echo)
            client.awaitOpen()
            let name = count == 0 ? "TKStream echo client, no idle connections" : "beside \(count.formatted()) idle connections"
            return Contender(name: name) { n in withExtendedLifetime(idle) { client.echo(n) } }
        }
        return Row(
            group: "io", name: "echo round trip, 64 B, beside idle connections on the loop (events/s = 10⁶ / µs)", operations: 20_000,
            unit: .microseconds, contenders: contenders, reference: contenders[0].name,
            target: "10,000 idle: ≥ 0.8× the events/s (≤ 1.25× the time) of no idle")
    }

    /// Lifts the soft descriptor limit to at least `needed` (up to the hard limit); stops with a
    /// message naming the fix when the hard limit is too low.
    static func raiseDescriptorLimit(to needed: Int) {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        guard limit.rlim_cur < rlim_t(needed) else { return }
        limit.rlim_cur = min(limit.rlim_max, rlim_t(needed))
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        precondition(
            limit.rlim_cur >= rlim_t(needed),
            "tkbench io: the idle-connections row needs \(needed) descriptors; the hard limit is \(limit.rlim_max). Fix: ulimit -Hn \(needed)"
        )
    }

    static func echoServer(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let tkServer = TKEchoServer(loop: tk.loop)
        let tkPeer = Loopback.connect(port: tkServer.port)
        let nioServer = try! ServerBootstrap(group: nio)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { $0.pipeline.addHandler(NIOEchoHandler()) }
            .bind(host: "127.0.0.1", port: 0).wait()
        let nioPeer = Loopback.connect(port: UInt16(nioServer.localAddress!.port!))
        let (listener, port) = Loopback.listener()
        let fdPeer = Loopback.connect(port: port)
        let fdServer = FileHandleClient(fd: Loopback.accept(listener), echoes: true)
        close(listener)
        return Row(
            group: "io", name: "echo server round trip, 64 B (server on the loop, blocking client)", operations: 20_000,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKSocketListener + TKStream") { n in withExtendedLifetime(tkServer) { blockingEcho(tkPeer, n) } },
                Contender(name: "NIO ServerBootstrap") { n in blockingEcho(nioPeer, n) },
                Contender(name: "Foundation FileHandle.readabilityHandler") { n in
                    withExtendedLifetime(fdServer) { blockingEcho(fdPeer, n) }
                },
            ], reference: "NIO ServerBootstrap", target: "≤ 1.0× NIO")
    }

    static func bulkSend(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let (tkClient, tkPeer, nioClient, nioPeer, fdClient, fdPeer) = clients(tk, nio, peers: .sink)
        return Row(
            group: "io", name: "bulk send, 64 KiB writes (per MiB)", operations: 64, unit: .mebibytesPerSecond,
            contenders: [
                Contender(name: "TKOutputStream on TKRunLoop") { n in
                    tkPeer.expect(n * mebibyte)
                    return timed {
                        tkClient.send(n * mebibyte)
                        tkPeer.awaitSunk()
                    }
                },
                Contender(name: "NIO channel") { n in
                    nioPeer.expect(n * mebibyte)
                    return timed {
                        nioClient.send(n * mebibyte)
                        nioPeer.awaitSunk()
                    }
                },
                Contender(name: "Foundation FileHandle.write") { n in
                    fdPeer.expect(n * mebibyte)
                    return timed {
                        fdClient.send(n * mebibyte)
                        fdPeer.awaitSunk()
                    }
                },
            ], reference: "NIO channel", target: "≥ 0.9× NIO, ≥ 2× Foundation")
    }

    static func bulkReceive(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let (tkClient, tkPeer, nioClient, nioPeer, fdClient, fdPeer) = clients(tk, nio, peers: .source)
        return Row(
            group: "io", name: "bulk receive (per MiB)", operations: 64, unit: .mebibytesPerSecond,
            contenders: [
                Contender(name: "TKInputStream on TKRunLoop") { n in tkClient.receive(n * mebibyte) { tkPeer.send(n * mebibyte) } },
                Contender(name: "NIO channel") { n in nioClient.receive(n * mebibyte) { nioPeer.send(n * mebibyte) } },
                Contender(name: "Foundation FileHandle.readabilityHandler") { n in
                    fdClient.receive(n * mebibyte) { fdPeer.send(n * mebibyte) }
                },
            ], reference: "NIO channel", target: "≥ 0.9× NIO, ≥ 2× Foundation")
    }

    /// n round trips of 64 bytes from this thread over a blocking socket.
    static func blockingEcho(_ fd: Int32, _ n: Int) -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ioMessage, alignment: 16)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 1)
        return timed {
            for _ in 0..<n {
                Loopback.writeAll(fd, UnsafeRawBufferPointer(buffer))
                Loopback.readExactly(fd, buffer)
            }
        }
    }
}

/// What a client contender counts on its loop's thread, and how the driver waits for it.
/// Fields: loop thread only, except `done` (a semaphore) and the set-up before a measurement,
/// which happens-before the loop sees it through the contender's own hand-off.
final class Tally: @unchecked Sendable {
    var remaining = 0 // echo: round trips left; receive: bytes left
    var partial = 0 // echo: bytes of the current reply received
    let done = DispatchSemaphore(value: 0)

    /// Counts `bytes` received; returns true when an echo round trip completed and another is due.
    func echoed(_ bytes: Int) -> Bool {
        partial += bytes
        var next = false
        while partial >= ioMessage {
            partial -= ioMessage
            remaining -= 1
            if remaining == 0 { done.signal() } else { next = true }
        }
        return next
    }

    func received(_ bytes: Int) {
        guard remaining > 0 else { return }
        remaining -= bytes
        if remaining <= 0 {
            remaining = 0
            done.signal()
        }
    }
}

// MARK: ThreadKit

/// A TKStream pair to the peer, scheduled on a TKRunLoop thread; its delegate runs there.
final class TKClient: TKStreamDelegate, @unchecked Sendable {
    let loop: TKRunLoop
    let input: TKInputStream
    let output: TKOutputStream
    let tally = Tally()
    let opened = DispatchSemaphore(value: 0)
    private var openCount = 0
    /// Bytes still to send in a bulk send; loop thread only.
    private var toSend = 0
    /// Whether what arrives is counted as echo replies or as received bytes; loop thread only.
    private var echoing = true
    private let chunk = UnsafeMutablePointer<UInt8>.allocate(capacity: ioChunk)

    init(loop: TKRunLoop, port: UInt16) {
        self.loop = loop
        chunk.initialize(repeating: 3, count: ioChunk)
        (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(port))
        loop.perform { [self] in
            for s in [input, output] as [TKStream] {
                s.delegate = self
                s.schedule(in: loop, forMode: .default)
                s.open()
            }
        }
    }

    func awaitOpen() {
        opened.wait()
        opened.wait()
    }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        if eventCode.contains(.openCompleted) { opened.signal() }
        if eventCode.contains(.hasBytesAvailable) {
            // Read until a read comes back short (the socket is drained) or, after a full one, the
            // stream has nothing more (a read on a scheduled stream without bytes would wait, as
            // NSStream's does); each read re-arms the event, so anything left is reported again.
            while true {
                let n = input.read(chunk, maxLength: ioChunk)
                if n <= 0 { break }
                if echoing {
                    if tally.echoed(n) { _ = output.write(chunk, maxLength: ioMessage) }
                } else {
                    tally.received(n)
                }
                if n < ioChunk || !input.hasBytesAvailable { break }
            }
        }
        if eventCode.contains(.hasSpaceAvailable) { pump() }
        if eventCode.contains(.errorOccurred) || eventCode.contains(.endEncountered) {
            fatalError("tkbench: TK stream ended: \(aStream.streamError.map { "\($0)" } ?? "end")")
        }
    }

    /// Writes until a write comes back short (the socket's buffer is full); the hasSpaceAvailable
    /// that write re-armed resumes.
    private func pump() {
        while toSend > 0 {
            let want = min(toSend, ioChunk)
            let n = output.write(chunk, maxLength: want)
            if n <= 0 { return }
            toSend -= n
            if n < want { return }
        }
    }

    /// Sets the mode and the count on the loop's thread before a measurement.
    private func prepare(echoing: Bool, remaining: Int) {
        let ready = DispatchSemaphore(value: 0)
        loop.perform { [self] in
            self.echoing = echoing
            tally.remaining = remaining
            tally.partial = 0
            ready.signal()
        }
        ready.wait()
    }

    func echo(_ n: Int) -> Double {
        prepare(echoing: true, remaining: n)
        return timed {
            loop.perform { [self] in _ = output.write(chunk, maxLength: ioMessage) }
            tally.done.wait()
        }
    }

    func send(_ bytes: Int) {
        loop.perform { [self] in
            toSend = bytes
            pump()
        }
    }

    func receive(_ bytes: Int, start: () -> Void) -> Double {
        prepare(echoing: false, remaining: bytes)
        return timed {
            start()
            tally.done.wait()
        }
    }
}

/// An echo server: a listener on the loop, each accepted connection a TKStream pair that writes
/// back what it reads.
final class TKEchoServer: @unchecked Sendable {
    let listener: TKSocketListener
    var port: UInt16 { listener.port }
    private var connections: [Connection] = [] // loop thread only

    final class Connection: TKStreamDelegate, @unchecked Sendable {
        let input: TKInputStream, output: TKOutputStream
        private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: ioChunk)
        init(_ pair: (inputStream: TKInputStream, outputStream: TKOutputStream)) { (input, output) = pair }
        func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
            guard eventCode.contains(.hasBytesAvailable) else { return }
            while true {
                let n = input.read(buffer, maxLength: ioChunk)
                if n <= 0 { return }
                var sent = 0
                while sent < n { // 64-byte messages: the socket buffer always has room
                    let w = output.write(buffer + sent, maxLength: n - sent)
                    precondition(w > 0, "tkbench: echo server write failed")
                    sent += w
                }
                if n < ioChunk || !input.hasBytesAvailable { return } // drained; the read re-armed the event
            }
        }
    }

    init(loop: TKRunLoop) {
        let box = Box()
        listener = try! TKSocketListener { fd in
            Loopback.noDelay(fd)
            let connection = Connection(TKStream.getStreams(forConnectedSocket: fd))
            box.server?.connections.append(connection)
            for s in [connection.input, connection.output] as [TKStream] {
                s.delegate = connection
                s.schedule(in: loop, forMode: .default)
                s.open()
            }
        }
        box.server = self
        let scheduled = DispatchSemaphore(value: 0)
        loop.perform { [listener] in
            listener.schedule(in: loop, forMode: .default)
            scheduled.signal()
        }
        scheduled.wait()
    }
    final class Box: @unchecked Sendable { weak var server: TKEchoServer? }
}

/// `count` idle connections on `loop`: both ends of count / 2 socketpairs, each end a stream
/// pair scheduled in the default mode and opened (the output's first hasSpaceAvailable is heard
/// once; after that nothing is ever ready). Made on the loop's thread; kept until released.
final class IdleConnections: TKStreamDelegate, @unchecked Sendable {
    private var streams: [TKStream] = [] // written on the loop's thread before `init` returns

    init(_ count: Int, on loop: TKRunLoop) {
        guard count > 0 else { return }
        let made = DispatchSemaphore(value: 0)
        loop.perform { [self] in
            for _ in 0..<(count / 2) {
                var fds: [Int32] = [0, 0]
                precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0, "socketpair: errno \(errno)")
                for fd in fds {
                    let (input, output) = TKStream.getStreams(forConnectedSocket: fd)
                    for s in [input, output] as [TKStream] {
                        s.delegate = self
                        s.schedule(in: loop, forMode: .default)
                        s.open()
                        streams.append(s)
                    }
                }
            }
            made.signal()
        }
        made.wait()
    }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        if eventCode.contains(.hasBytesAvailable) || eventCode.contains(.errorOccurred) || eventCode.contains(.endEncountered) {
            fatalError("tkbench: an idle connection was not idle (\(eventCode))")
        }
    }
}

// MARK: SwiftNIO

final class NIOClient: @unchecked Sendable {
    let channel: any Channel
    let handler: Handler

    final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let tally = Tally()
        var context: ChannelHandlerContext!
        var message: ByteBuffer!
        var chunk: ByteBuffer!
        var toSend = 0 // loop thread only
        var echoing = false

        func handlerAdded(context: ChannelHandlerContext) {
            self.context = context
            message = context.channel.allocator.buffer(repeating: 1, count: ioMessage)
            chunk = context.channel.allocator.buffer(repeating: 3, count: ioChunk)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data).readableBytes
            if echoing {
                if tally.echoed(bytes) { context.writeAndFlush(wrapOutboundOut(message), promise: nil) }
            } else {
                tally.received(bytes)
            }
        }

        func channelWritabilityChanged(context: ChannelHandlerContext) { pump() }

        func pump() {
            while toSend > 0 && context.channel.isWritable {
                let n = min(toSend, ioChunk)
                context.write(wrapOutboundOut(n == ioChunk ? chunk : chunk.getSlice(at: 0, length: n)!), promise: nil)
                toSend -= n
            }
            context.flush()
        }
    }

    init(loop: any EventLoop, port: UInt16) {
        let handler = Handler()
        self.handler = handler
        channel = try! ClientBootstrap(group: loop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { $0.pipeline.addHandler(handler) }
            .connect(host: "127.0.0.1", port: Int(port)).wait()
    }

    func echo(_ n: Int) -> Double {
        try! channel.eventLoop.submit { [handler] in
            handler.echoing = true
            handler.tally.remaining = n
            handler.tally.partial = 0
        }.wait()
        return timed {
            channel.eventLoop.execute { [handler] in handler.context.writeAndFlush(handler.wrapOutboundOut(handler.message), promise: nil) }
            handler.tally.done.wait()
        }
    }

    func send(_ bytes: Int) {
        channel.eventLoop.execute { [handler] in
            handler.toSend = bytes
            handler.pump()
        }
    }

    func receive(_ bytes: Int, start: () -> Void) -> Double {
        try! channel.eventLoop.submit { [handler] in
            handler.echoing = false
            handler.tally.remaining = bytes
        }.wait()
        return timed {
            start()
            handler.tally.done.wait()
        }
    }
}

/// A NIO echo server's handler.
final class NIOEchoHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.writeAndFlush(data, promise: nil) }
}

// MARK: Foundation

/// A socket heard through `FileHandle.readabilityHandler` (Foundation runs it on a Dispatch
/// queue), answered with `FileHandle.write`. As a client its measurements are started by this
/// driver thread writing the first message itself.
final class FileHandleClient: @unchecked Sendable {
    let handle: FileHandle
    let tally = Tally()
    private let message = Data(repeating: 1, count: ioMessage)
    private let chunk = Data(repeating: 3, count: ioChunk)
    /// Whether replies count as echo round trips (else as received bytes); set by the driver
    /// before the measurement's first byte is sent, read by the handler after it.
    private let echoing = Atomic<Bool>(true)

    init(fd: Int32, echoes: Bool = false) {
        handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        handle.readabilityHandler = { [self] h in
            let data = h.availableData
            if data.isEmpty { return }
            if echoes {
                h.write(data)
            } else if echoing.load(ordering: .relaxed) {
                if tally.echoed(data.count) { h.write(message) }
            } else {
                tally.received(data.count)
            }
        }
    }

    func echo(_ n: Int) -> Double {
        echoing.store(true, ordering: .relaxed)
        tally.remaining = n
        tally.partial = 0
        return timed {
            handle.write(message)
            tally.done.wait()
        }
    }

    /// Foundation's send is a blocking write; made from the driver thread.
    func send(_ bytes: Int) {
        var left = bytes
        while left > 0 {
            let n = min(left, ioChunk)
            handle.write(n == ioChunk ? chunk : chunk.prefix(n))
            left -= n
        }
    }

    func receive(_ bytes: Int, start: () -> Void) -> Double {
        echoing.store(false, ordering: .relaxed)
        tally.remaining = bytes
        return timed {
            start()
            tally.done.wait()
        }
    }
}
