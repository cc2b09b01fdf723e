// PortBenchmarks: perform requests and port messages (SPEC §3, §4).
//   - perform-on-thread round trip with wait: TKThread.perform(waitUntilDone: true) against our
//     own run-loop wakeup round trip (loop.perform + a semaphore the block signals) and NIO's
//     EventLoop.submit(...).wait();
//   - port messages to a loop on another thread, in-process: TKMessagePort against NIO's
//     EventLoop.execute (the nearest incumbent: Foundation has no MessagePort on Linux);
//   - port messages between two processes over a Unix socket and loopback TCP: a child tkbench
//     process sends, this one receives; timed from the first message received to the last.
import Foundation
import Glibc
import NIOCore
import NIOPosix
import Synchronization
import ThreadKit

/// Counts delivered messages and signals when the expected number arrived. Loop thread only,
/// except `expect` (called before the messages are sent).
final class CountingDelegate: TKPortDelegate, @unchecked Sendable {
    private var received = 0
    private var expected = 0
    private var firstAt: UInt64 = 0
    private(set) var lastAt: UInt64 = 0
    let done = DispatchSemaphore(value: 0)

    func expect(_ n: Int) {
        received = 0
        expected = n
    }

    var firstArrival: UInt64 { firstAt }

    func handlePortMessage(_ message: TKPortMessage) {
        received += 1
        if received == 1 { firstAt = now() }
        if received == expected {
            lastAt = now()
            done.signal()
        }
    }
}

enum PortBenchmarks {
    static func rows() -> [Row] {
        [performRoundTrip(), inProcessMessages(), crossProcessMessages()]
    }

    static func performRoundTrip() -> Row {
        let worker = BenchLoop()
        let thread = worker.thread
        let nio = RunLoopBenchmarks.group.next()
        return Row(
            group: "ports", name: "perform on another thread, waiting until done (round trip)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKThread.perform(waitUntilDone:)") { n in
                    timed { for _ in 0..<n { try! thread.perform(waitUntilDone: true) {} } }
                },
                Contender(name: "TKRunLoop.perform + semaphore") { n in
                    let done = DispatchSemaphore(value: 0)
                    return timed {
                        for _ in 0..<n {
                            worker.loop.perform { done.signal() }
                            done.wait()
                        }
                    }
                },
                Contender(name: "NIO submit().wait()") { n in
                    timed { for _ in 0..<n { try! nio.submit {}.wait() } }
                },
            ], reference: "TKRunLoop.perform + semaphore", target: "≤ 1.2× our loop wakeup round trip")
    }

    /// A message port on a loop thread of its own (which runs until the process ends), with a
    /// counting delegate.
    static func portOnLoop() -> (TKMessagePort, CountingDelegate) {
        let worker = BenchLoop()
        let port = TKMessagePort()
        let delegate = CountingDelegate()
        port.delegate = delegate
        worker.loop.add(port, forMode: .default)
        return (port, delegate)
    }

    static func inProcessMessages() -> Row {
        let (port, delegate) = portOnLoop()
        let nio = RunLoopBenchmarks.group.next()
        return Row(
            group: "ports", name: "port messages to a loop on another thread (per message)", operations: 500_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKMessagePort") { n in
                    delegate.expect(n)
                    return timed {
                        for i in 0..<n {
                            let message = TKPortMessage(sendPort: port, receivePort: nil, components: [])
                            message.msgid = UInt32(truncatingIfNeeded: i)
                            _ = message.send(before: .now + .seconds(60))
                        }
                        delegate.done.wait()
                    }
                },
                RunLoopBenchmarks.nioExecute(nio),
            ], reference: "NIO EventLoop.execute", target: "≤ 1000 ns (≥ 1 M messages/s)")
    }

    static func crossProcessMessages() -> Row {
        let worker = BenchLoop()
        let path = "/tmp/tkbench-\(getpid()).sock"
        let unixPort = try! TKSocketPort(unixSocketPath: path)
        let tcpPort = try! TKSocketPort(tcpPort: 0)
        let unixDelegate = CountingDelegate()
        let tcpDelegate = CountingDelegate()
        unixPort.delegate = unixDelegate
        tcpPort.delegate = tcpDelegate
        worker.loop.add(unixPort, forMode: .default)
        worker.loop.add(tcpPort, forMode: .default)
        func contender(_ name: String, _ address: String, _ delegate: CountingDelegate) -> Contender {
            Contender(name: name) { n in
                delegate.expect(n)
                let child = spawnSender(address, n)
                delegate.done.wait()
                var status: Int32 = 0
                waitpid(child, &status, 0)
                // From the first message received to the last: n - 1 intervals, scaled to n.
                return Double(delegate.lastAt - delegate.firstArrival) * Double(n) / Double(max(1, n - 1))
            }
        }
        return Row(
            group: "ports", name: "port messages from another process, 16-byte payload (per message)", operations: 200_000,
            unit: .nanoseconds,
            contenders: [
                contender("TKSocketPort, Unix socket", "unix:\(path)", unixDelegate),
                contender("TKSocketPort, loopback TCP", "tcp:\(tcpPort.localPort!)", tcpDelegate),
            ], reference: "TKSocketPort, Unix socket", target: "(no incumbent on Linux)")
    }

    /// Starts `tkbench port-sender ADDRESS N` (this executable).
    static func spawnSender(_ address: String, _ count: Int) -> pid_t {
        let argv = ["tkbench", "port-sender", address, "\(count)"]
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        let r = posix_spawn(&pid, "/proc/self/exe", nil, nil, &cArgs, environ)
        precondition(r == 0, "posix_spawn failed: \(r)")
        return pid
    }

    /// The child side: sends `count` messages with a 16-byte payload to `address`.
    static func sender(_ arguments: [String]) -> Int32 {
        guard arguments.count == 2, let count = Int(arguments[1]) else { return 2 }
        let parts = arguments[0].split(separator: ":", maxSplits: 1).map(String.init)
        let port: TKSocketPort
        if parts[0] == "unix" {
            port = try! TKSocketPort(unixSocketPath: parts[1], remote: true)
        } else {
            port = try! TKSocketPort(remoteHost: "127.0.0.1", port: UInt16(parts[1])!)
        }
        let payload = [UInt8](repeating: 7, count: 16)
        for i in 0..<count {
            let message = TKPortMessage(sendPort: port, receivePort: nil, components: [.data(payload)])
            message.msgid = UInt32(truncatingIfNeeded: i)
            guard message.send(before: .now + .seconds(60)) else {
                FileHandle.standardError.write(Data("send failed: \(message.failureReason ?? "?")\n".utf8))
                return 1
            }
        }
        return 0
    }
}
