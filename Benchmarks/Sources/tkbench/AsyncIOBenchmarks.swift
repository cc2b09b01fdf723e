// AsyncIOBenchmarks: issue 28 item 2's rows, a connection handler written in async/await.
// ThreadKit: one task preferring the client's TKRunLoop as its task executor
// (`Task(executorPreference:)`) reads `TKInputStream.chunks` and awaits `TKOutputStream.write`: its
// reads, writes and the code between them run on the loop's thread, with no hop. SwiftNIO: the
// same handler on `NIOAsyncChannel` (its inbound sequence and outbound writer) in a task on Swift's
// global executor, which hops from the channel's event loop to that task on every read. And
// IOBenchmarks' delegate client (`TKClient`) on the same loop, the no-async baseline. Each async
// client is one long-lived task that serves the driver's measurement requests (an AsyncStream), so
// a measurement times round trips and reads, not a task's set-up. Peers: IOBenchmarks' blocking
// peer threads, one per connection, each accepted right after its client connects.
// Threads: the driver (main) thread builds the clients and asks for measurements; the async clients'
// work runs in their tasks; `done` hands each measurement's end back to the driver.
import Foundation
import NIOCore
import NIOPosix
import ThreadKit

/// A measurement asked of an async client: `echo(n)` round trips of 64 bytes, or `receive(bytes)`
/// from a peer the driver has told to send them.
enum AsyncWork: Sendable {
    case echo(Int)
    case receive(Int)
}

enum AsyncIOBenchmarks {
    static func rows() -> [Row] {
        let tk = BenchLoop()
        let nio = RunLoopBenchmarks.group.next()
        return [echo(tk, nio), bulkReceive(tk, nio)]
    }

    /// The three clients, each connected over loopback to a blocking peer of its own.
    static func clients(_ tk: BenchLoop, _ nio: any EventLoop, peers role: BlockingPeer.Role)
        -> (TKAsyncClient, BlockingPeer, NIOAsyncClient, BlockingPeer, TKClient, BlockingPeer)
    {
        let (listener, port) = Loopback.listener()
        defer { close(listener) }
        let tkAsync = TKAsyncClient(loop: tk.loop, port: port)
        let tkAsyncPeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        let nioAsync = NIOAsyncClient(loop: nio, port: port)
        let nioAsyncPeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        let tkDelegate = TKClient(loop: tk.loop, port: port)
        let tkDelegatePeer = BlockingPeer(fd: Loopback.accept(listener), role: role)
        tkDelegate.awaitOpen()
        return (tkAsync, tkAsyncPeer, nioAsync, nioAsyncPeer, tkDelegate, tkDelegatePeer)
    }

    static func echo(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let (tkAsync, _, nioAsync, _, tkDelegate, _) = clients(tk, nio, peers: .echo)
        return Row(
            group: "io", name: "async echo round trip, 64 B (handler in async/await, blocking echo peer)", operations: 20_000,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKStream async, task on the TKRunLoop") { n in tkAsync.run(.echo(n)) },
                Contender(name: "NIOAsyncChannel") { n in nioAsync.run(.echo(n)) },
                Contender(name: "TKStream delegate on the TKRunLoop") { n in tkDelegate.echo(n) },
            ], reference: "NIOAsyncChannel", target: "≤ 0.6× NIOAsyncChannel, ≤ 1.2× the delegate")
    }

    static func bulkReceive(_ tk: BenchLoop, _ nio: any EventLoop) -> Row {
        let (tkAsync, tkAsyncPeer, nioAsync, nioAsyncPeer, tkDelegate, tkDelegatePeer) = clients(tk, nio, peers: .source)
        return Row(
            group: "io", name: "async bulk receive (per MiB)", operations: 64, unit: .mebibytesPerSecond,
            contenders: [
                Contender(name: "TKInputStream.chunks, task on the TKRunLoop") { n in
                    tkAsync.run(.receive(n * mebibyte)) { tkAsyncPeer.send(n * mebibyte) }
                },
                Contender(name: "NIOAsyncChannel") { n in
                    nioAsync.run(.receive(n * mebibyte)) { nioAsyncPeer.send(n * mebibyte) }
                },
                Contender(name: "TKInputStream delegate on the TKRunLoop") { n in
                    tkDelegate.receive(n * mebibyte) { tkDelegatePeer.send(n * mebibyte) }
                },
            ], reference: "NIOAsyncChannel", target: "≥ 1.0× NIOAsyncChannel")
    }
}

/// What both async clients share: the request stream their task serves, and the semaphore that
/// tells the driver a measurement is over.
class AsyncClientDriver: @unchecked Sendable {
    let requests: AsyncStream<AsyncWork>
    private let continuation: AsyncStream<AsyncWork>.Continuation
    let done = DispatchSemaphore(value: 0)

    init() { (requests, continuation) = AsyncStream.makeStream(of: AsyncWork.self) }

    /// Times one measurement: `start` (a peer told to send), the request, its end.
    func run(_ work: AsyncWork, start: () -> Void = {}) -> Double {
        timed {
            start()
            continuation.yield(work)
            done.wait()
        }
    }
}

/// The peer closed the connection in the middle of a measurement.
struct PeerClosed: Error {}

/// The size of the next chunk a stream's iterator gives.
func next(_ chunks: inout TKInputStream.Chunks.AsyncIterator) async throws -> Int {
    guard let chunk = try await chunks.next() else { throw PeerClosed() }
    return chunk.count
}

/// The size of the next buffer a NIOAsyncChannel's inbound iterator gives.
func next(_ reads: inout NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator) async throws -> Int {
    guard let buffer = try await reads.next() else { throw PeerClosed() }
    return buffer.readableBytes
}

// MARK: ThreadKit

/// A TKStream pair to the peer, scheduled on a TKRunLoop thread, served by a task that prefers
/// that loop: every resume of the task runs on the loop's thread.
final class TKAsyncClient: AsyncClientDriver, @unchecked Sendable {
    init(loop: TKRunLoop, port: UInt16) {
        super.init()
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(port))
        loop.perform {
            for stream in [input, output] as [TKStream] {
                stream.schedule(in: loop, forMode: .default)
                stream.open()
            }
        }
        let requests = self.requests
        let done = self.done
        Task(executorPreference: loop) {
            let message = [UInt8](repeating: 1, count: ioMessage)
            var chunks = input.chunks(maxLength: ioChunk).makeAsyncIterator()
            do {
                for await work in requests {
                    switch work {
                    case .echo(let n):
                        for _ in 0..<n {
                            try await output.write(message)
                            var got = 0
                            while got < ioMessage { got += try await next(&chunks) }
                        }
                    case .receive(let bytes):
                        var got = 0
                        while got < bytes { got += try await next(&chunks) }
                    }
                    done.signal()
                }
            } catch {
                fatalError("tkbench: the TKStream async client failed: \(error)")
            }
        }
    }
}

// MARK: SwiftNIO

/// A NIOAsyncChannel to the peer, served by a task on Swift's global executor (NIO's documented
/// way: `executeThenClose`, its inbound sequence and outbound writer).
final class NIOAsyncClient: AsyncClientDriver, @unchecked Sendable {
    init(loop: any EventLoop, port: UInt16) {
        super.init()
        let requests = self.requests
        let done = self.done
        let connected = DispatchSemaphore(value: 0)
        Task {
            do {
                let channel = try await ClientBootstrap(group: loop)
                    .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                    .connect(host: "127.0.0.1", port: Int(port)) { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                        }
                    }
                connected.signal()
                try await channel.executeThenClose { inbound, outbound in
                    let message = ByteBuffer(repeating: 1, count: ioMessage)
                    var reads = inbound.makeAsyncIterator()
                    for await work in requests {
                        switch work {
                        case .echo(let n):
                            for _ in 0..<n {
                                try await outbound.write(message)
                                var got = 0
                                while got < ioMessage { got += try await next(&reads) }
                            }
                        case .receive(let bytes):
                            var got = 0
                            while got < bytes { got += try await next(&reads) }
                        }
                        done.signal()
                    }
                }
            } catch {
                fatalError("tkbench: the NIOAsyncChannel client failed: \(error)")
            }
        }
        connected.wait()
    }
}
