// NetworkScenarios: the seeds' network stories on run-loop I/O (docs/RunLoopIO.md), against a
// small HTTP server on 127.0.0.1 (TinyHTTPServer, plain POSIX, the independent judge):
//   - background-request: seed 001's NSURLConnection made on a performSelectorInBackground thread
//     (code 1: started and left; code 2: the loop run first, then the connection scheduled; code 3:
//     scheduled first, the loop run last — the only one that is answered);
//   - resident-network-thread: AFNetworking's one network thread serving three streamed requests
//     at once, one cancelled, then shut down through seed 004's shouldKeepRunning flag;
//   - echo-server: a listening socket and 100 clients, all on one loop thread, exact bytes.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum NetworkScenarios {
    static let all: [Scenario] = [backgroundRequest, residentNetworkThread, echoServer]

    // MARK: background-request

    static let backgroundRequest = Scenario(
        name: "background-request",
        title: "a request from a performInBackground thread is answered only if scheduled first and the loop run last",
        source: "Run loops and threads article (seed 001): NSURLConnection in performSelectorInBackground, code 1, code 2, code 3"
    ) { say in
        let server = try TinyHTTPServer()
        defer { server.stop() }
        let path = "/bytes/20000"

        /// Runs `body` on a performInBackground thread with a connection made there; returns the
        /// delegate calls it got, once the thread has ended.
        func attempt(_ label: String, _ body: @escaping @Sendable (HTTPConnection, TKRunLoop) -> Void) throws -> [String] {
            let calls = Mutex<[String]>([])
            let connection = SharedBox<HTTPConnection?>(nil) // the background thread writes it; read after that thread ended
            let requestsBefore = server.requests.load(ordering: .relaxed)
            let thread = TKThread.performInBackground {
                let on = TKThread.current.name ?? "?"
                let c = HTTPConnection(
                    port: server.port, path: path,
                    callbacks: .init(
                        didReceiveResponse: { status, _ in calls.withLock { $0.append("didReceiveResponse \(status) on \(on)") } },
                        didReceiveData: { n in calls.withLock { $0.append("didReceiveData \(n)") } },
                        didFinishLoading: { calls.withLock { $0.append("didFinishLoading") } },
                        didFail: { e in calls.withLock { $0.append("didFail \(e)") } }))
                connection.value = c
                body(c, TKRunLoop.current)
            }
            try say.check(pollUntil(.now + .seconds(20)) { thread.isFinished }, "\(label): the background thread did not end")
            let got = calls.withLock { $0 }
            let requests = server.requests.load(ordering: .relaxed) - requestsBefore
            say.say(
                "\(label): the thread has ended; the server read \(requests) request(s); delegate calls: "
                    + (got.isEmpty ? "none" : "\(got.count) (\(got.first!) … \(got.last!))"))
            connection.value?.cancel() // its loop is gone: nothing else will ever close it
            return got
        }

        let code1 = try attempt("code 1 (start, then return: the thread's loop never runs)") { c, loop in
            c.schedule(in: loop, forMode: .default)
            c.start()
        }
        let code2 = try attempt("code 2 (run the loop first, then schedule and start)") { c, loop in
            loop.run() // nothing in the mode yet: returns at once
            c.schedule(in: loop, forMode: .default)
            c.start()
        }
        let finished = Atomic<Bool>(false)
        let code3 = try attempt("code 3 (schedule and start, then run the loop last)") { c, loop in
            let done = c.callbacks.didFinishLoading
            let failed = c.callbacks.didFail
            c.callbacks.didFinishLoading = {
                done()
                finished.store(true, ordering: .relaxed)
            }
            c.callbacks.didFail = { e in
                failed(e)
                finished.store(true, ordering: .relaxed)
            }
            c.schedule(in: loop, forMode: .default)
            c.start()
            let deadline = ContinuousClock.now + .seconds(10)
            while !finished.load(ordering: .relaxed) && loop.run(mode: .default, before: deadline) {}
        }
        try say.check(code1.isEmpty && code2.isEmpty, "a connection whose loop never ran called its delegate")
        try say.check(
            code3.first?.hasPrefix("didReceiveResponse 200 on performInBackground") == true
                && code3.last == "didFinishLoading", "code 3 was not answered on its own thread: \(code3)")
        let bytes = code3.compactMap { $0.hasPrefix("didReceiveData ") ? Int($0.dropFirst(15)) : nil }.reduce(0, +)
        try say.check(bytes == 20_000, "code 3 received \(bytes) of 20000 body bytes")
        say.say("code 3's \(bytes) body bytes match the server's pattern, delivered on the background thread")
        return "only code 3 (schedule first, run the loop last) was answered"
    }

    // MARK: resident-network-thread

    static let residentNetworkThread = Scenario(
        name: "resident-network-thread",
        title: "one resident network thread streams three requests at once, one cancelled, then stops through shouldKeepRunning",
        source:
            "Seed 001 (AFNetworking's networkRequestThread, operationDidStart / cancelConnection) and seed 004 (shouldKeepRunning with runMode:beforeDate:)"
    ) { say in
        let server = try TinyHTTPServer()
        defer { server.stop() }
        let shouldKeepRunning = Atomic<Bool>(true)
        let loopReturns = Atomic<Int>(0)
        let network = TKThread(name: "AFNetworking") {
            let loop = TKRunLoop.current
            loop.add(TKMessagePort(), forMode: .default) // keeps the loop alive with no request
            while shouldKeepRunning.load(ordering: .acquiring) && loop.run(mode: .default, before: .now + .seconds(5)) {
                loopReturns.add(1, ordering: .relaxed)
            }
        }
        network.start()

        struct Record {
            var events: [String] = []
            var received = 0
            var finished = false
            var failed: String?
        }
        let records = Mutex<[String: Record]>([:])
        let order = Mutex<[String]>([]) // which request each piece of data belonged to, in order
        let allThreadsRight = Atomic<Bool>(true)
        let connections = SharedBox<[String: HTTPConnection]>([:]) // network thread only
        let firstDataOfC = Latch(count: 1)
        let twoDone = Latch(count: 2)
        for name in ["A", "B", "C"] {
            // operationDidStart, performed on the network thread.
            try network.perform(modes: [.default]) {
                let check = { if TKThread.current !== network { allThreadsRight.store(false, ordering: .relaxed) } }
                let c = HTTPConnection(
                    port: server.port, path: "/slow/60000/12",
                    callbacks: .init(
                        didReceiveResponse: { status, length in
                            check()
                            records.withLock { $0[name, default: Record()].events.append("\(status), \(length) bytes") }
                        },
                        didReceiveData: { n in
                            check()
                            let first = records.withLock { r -> Bool in
                                r[name, default: Record()].received += n
                                return r[name]!.received == n
                            }
                            order.withLock { $0.append(name) }
                            if name == "C" && first { firstDataOfC.countDown() }
                        },
                        didFinishLoading: {
                            check()
                            records.withLock { $0[name]!.finished = true }
                            twoDone.countDown()
                        },
                        didFail: { e in
                            records.withLock { $0[name, default: Record()].failed = e }
                            twoDone.countDown()
                        }))
                connections.value[name] = c
                c.schedule(in: TKRunLoop.current, forMode: .default)
                c.start()
            }
        }
        try say.check(firstDataOfC.wait(until: .now + .seconds(20)), "request C never started streaming")
        // The user cancels C: AFNetworking sends cancelConnection to the network thread.
        try network.perform(modes: [.default]) { connections.value["C"]?.cancel() }
        say.say("C cancelled after its first bytes")
        try say.check(twoDone.wait(until: .now + .seconds(20)), "A and B did not finish")
        try say.check(pollUntil(.now + .seconds(20)) { server.abandoned.load(ordering: .relaxed) == 1 }, "the server never saw C go away")
        let final = records.withLock { $0 }
        for name in ["A", "B", "C"] {
            let r = final[name] ?? Record()
            say.say(
                "\(name): \(r.events.joined()), received \(r.received) body bytes, "
                    + (r.finished ? "finished" : r.failed.map { "failed: \($0)" } ?? "no more callbacks after cancel"))
        }
        let pieces = order.withLock { $0 }
        let firstB = pieces.firstIndex(of: "B") ?? .max
        let lastA = pieces.lastIndex(of: "A") ?? -1
        say.say("data callbacks in arrival order: \(pieces.map { $0 }.joined())")
        try say.check(firstB < lastA, "the requests did not stream at the same time")
        try say.check(
            final["A"]?.finished == true && final["B"]?.finished == true && final["A"]?.received == 60_000
                && final["B"]?.received == 60_000, "A and B did not receive exactly 60000 bytes each")
        try say.check(final["C"].map { !$0.finished && $0.failed == nil && $0.received < 60_000 } == true, "C was not cancelled cleanly")
        let intact = try network.performWaiting { connections.value.values.allSatisfy(\.bodyIntact) }
        try say.check(
            intact && allThreadsRight.load(ordering: .relaxed), "bytes differed from the server's or a callback ran off the network thread")
        say.say(
            "every callback ran on the AFNetworking thread; the server: \(server.completed.load(ordering: .relaxed)) responses sent in full, "
                + "\(server.abandoned.load(ordering: .relaxed)) cut short by the cancel")

        // Shut down as seed 004 does: clear the flag, then send the thread one request so that
        // runMode:beforeDate: returns and the while condition is read again.
        let stopStart = ContinuousClock.now
        shouldKeepRunning.store(false, ordering: .releasing)
        try network.perform(modes: [.default]) { connections.value.removeAll() }
        try say.check(network.join(until: .now + .seconds(10)), "the network thread did not leave its loop")
        let took = ContinuousClock.now - stopStart
        say.say(
            "shouldKeepRunning = false + one perform: the loop returned and the thread ended in \(took.formatted) "
                + "(not at the 5 s date); runMode:beforeDate: returned \(loopReturns.load(ordering: .relaxed)) times in all")
        return "3 concurrent requests on one resident thread, 1 cancelled, 2 × 60000 exact bytes, clean shutdown"
    }

    // MARK: echo-server

    static let echoServer = Scenario(
        name: "echo-server", title: "a listening socket and 100 clients on one loop thread, exact bytes both ways",
        source: "Seed 000 (a run loop's input sources include sockets) and CFSocket's accept callback"
    ) { say in
        let clients = 100
        let size = 8_192
        _ = TKRunLoop.main // made once per process, on first use (any loop's run touches it)
        let fdsBefore = openDescriptors()
        let result = Mutex<(verified: Int, failures: [String], echoedBytes: Int)>((0, [], 0))
        let allDone = Latch(count: clients)
        let loopThread = TKThread(name: "echo-loop") {
            let loop = TKRunLoop.current
            let echoes = SharedBox<[EchoConnection]>([]) // the loop thread only
            let listener: TKSocketListener
            do {
                listener = try TKSocketListener { fd in
                    let connection = EchoConnection(TKStream.getStreams(forConnectedSocket: fd)) { bytes in
                        result.withLock { $0.echoedBytes += bytes }
                    }
                    echoes.value.append(connection)
                    connection.start(on: loop)
                }
            } catch {
                result.withLock { $0.failures.append("listener: \(error)") }
                for _ in 0..<clients { allDone.countDown() }
                return
            }
            listener.schedule(in: loop, forMode: .default)
            var echoClients: [EchoClient] = []
            for i in 0..<clients {
                let client = EchoClient(id: i, size: size, port: listener.port) { outcome in
                    result.withLock { if let failure = outcome { $0.failures.append(failure) } else { $0.verified += 1 } }
                    allDone.countDown()
                }
                echoClients.append(client)
                client.start(on: loop)
            }
            let deadline = ContinuousClock.now + .seconds(30)
            while result.withLock({ $0.verified + $0.failures.count }) < clients && ContinuousClock.now < deadline {
                _ = loop.run(mode: .default, before: deadline)
            }
            for client in echoClients { client.close() }
            for echo in echoes.value { echo.close() }
            listener.invalidate()
        }
        loopThread.start()
        try say.check(allDone.wait(until: .now + .seconds(40)), "not every client finished")
        try say.check(loopThread.join(until: .now + .seconds(10)), "the loop thread did not end")
        let r = result.withLock { $0 }
        say.say("\(clients) clients each sent \(size) distinct bytes and read them back: \(r.verified) exact, \(r.failures.count) failed")
        for failure in r.failures.prefix(3) { say.say("  failure: \(failure)") }
        say.say("the server side echoed \(r.echoedBytes) bytes; all of it on one thread, one epoll set")
        let fdsAfter = openDescriptors()
        let left = fdsAfter.filter { fdsBefore[$0.key] != $0.value }.sorted { $0.key < $1.key }
        say.say(
            "open descriptors before: \(fdsBefore.count), after: \(fdsAfter.count)"
                + (left.isEmpty ? "" : "; new: " + left.map { "\($0.key) → \($0.value)" }.joined(separator: ", ")))
        try say.check(r.verified == clients && r.echoedBytes == clients * size, "echo mismatch")
        try say.check(left.isEmpty, "descriptors left open: \(left.count)")
        return "100 clients × 8192 bytes echoed exactly on one loop thread, no descriptor left open"
    }

    /// The process's open descriptors and what each is (/proc/self/fd).
    static func openDescriptors() -> [Int32: String] {
        guard let dir = opendir("/proc/self/fd") else { return [:] }
        defer { closedir(dir) }
        var result: [Int32: String] = [:]
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = Int32(name) else { continue }
            var target = [CChar](repeating: 0, count: 256)
            let n = readlink("/proc/self/fd/\(name)", &target, 255)
            result[fd] = n > 0 ? String(decoding: target[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        }
        result[dirfd(dir)] = nil
        return result
    }

    // safety: touched on the loop's thread only (its stream delegate calls).
    /// The server side of one echo connection: writes back what it reads, keeping what the socket
    /// would not take until it has room (loop thread only).
    final class EchoConnection: TKStreamDelegate, @unchecked Sendable {
        let input: TKInputStream, output: TKOutputStream
        private var pending: [UInt8] = []
        private let echoed: (Int) -> Void
        private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 16_384)

        init(_ pair: (inputStream: TKInputStream, outputStream: TKOutputStream), echoed: @escaping (Int) -> Void) {
            (input, output) = pair
            self.echoed = echoed
        }
        deinit { buffer.deallocate() }

        func start(on loop: TKRunLoop) {
            for s in [input, output] as [TKStream] {
                s.delegate = self
                s.schedule(in: loop, forMode: .default)
                s.open()
            }
        }

        func close() {
            input.close()
            output.close()
        }

        func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
            if eventCode.contains(.hasBytesAvailable) {
                while pending.count < 65_536 && input.hasBytesAvailable {
                    let n = input.read(buffer, maxLength: 16_384)
                    if n <= 0 { break }
                    pending.append(contentsOf: UnsafeBufferPointer(start: buffer, count: n))
                }
            }
            if eventCode.contains(.endEncountered) || eventCode.contains(.errorOccurred) {
                close()
                return
            }
            flush()
        }

        private func flush() {
            while !pending.isEmpty && output.hasSpaceAvailable {
                let n = pending.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
                if n <= 0 { return }
                pending.removeFirst(n)
                echoed(n)
            }
        }
    }

    // safety: touched on the loop's thread only (its stream delegate calls).
    /// One client: sends `size` bytes seeded by its id, reads them back, checks them.
    final class EchoClient: TKStreamDelegate, @unchecked Sendable {
        let id: Int, size: Int
        let input: TKInputStream, output: TKOutputStream
        private var sent = 0, received = 0, mismatch = false, ended = false
        private let done: (String?) -> Void
        private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 16_384)
        private let message: [UInt8]

        init(id: Int, size: Int, port: UInt16, done: @escaping (String?) -> Void) {
            self.id = id
            self.size = size
            self.done = done
            message = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ id &* 7) }
            (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(port))
        }
        deinit { buffer.deallocate() }

        func start(on loop: TKRunLoop) {
            for s in [input, output] as [TKStream] {
                s.delegate = self
                s.schedule(in: loop, forMode: .default)
                s.open()
            }
        }

        func close() {
            input.close()
            output.close()
        }

        func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
            guard !ended else { return }
            if eventCode.contains(.errorOccurred) { return finish("client \(id): \(aStream.streamError.map { "\($0)" } ?? "error")") }
            if eventCode.contains(.hasSpaceAvailable) {
                while sent < size && output.hasSpaceAvailable {
                    let n = message.withUnsafeBufferPointer { output.write($0.baseAddress! + sent, maxLength: size - sent) }
                    if n <= 0 { break }
                    sent += n
                }
            }
            if eventCode.contains(.hasBytesAvailable) {
                while received < size && input.hasBytesAvailable {
                    let n = input.read(buffer, maxLength: 16_384)
                    if n <= 0 { break }
                    for i in 0..<n where received + i >= size || buffer[i] != message[received + i] {
                        mismatch = true
                        break
                    }
                    received += n
                }
                if received >= size { finish(mismatch || received != size ? "client \(id): bytes differ" : nil) }
            }
            if eventCode.contains(.endEncountered) { finish("client \(id): the server closed after \(received) bytes") }
        }

        private func finish(_ failure: String?) {
            ended = true
            close()
            done(failure)
        }
    }
}

extension TKThread {
    /// Runs `body` on this thread (its loop) and returns its result.
    func performWaiting<T: Sendable>(_ body: @escaping @Sendable () -> T) throws -> T {
        let result = Mutex<T?>(nil)
        try perform(waitUntilDone: true, modes: [.default]) { result.withLock { $0 = body() } }
        return result.withLock { $0! }
    }
}

extension Duration {
    /// Milliseconds with one decimal, for narration.
    var formatted: String {
        let micros = components.seconds * 1_000_000 + components.attoseconds / 1_000_000_000_000
        return micros < 1000 ? "\(micros) µs" : "\(micros / 1000).\(micros % 1000 / 100) ms"
    }
}
