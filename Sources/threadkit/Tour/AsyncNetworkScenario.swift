import ChildProcessRoles
// AsyncNetworkScenario: the seeds' resident network thread (AFNetworking's networkRequestThread)
// written as an async function (issue 28): a task that prefers the thread's run loop as its task
// executor sends three requests at once to a small HTTP server on 127.0.0.1 (TinyHTTPServer, plain
// POSIX, the judge of the bytes) with `TKOutputStream.write(_:)` and reads the answers with
// `TKInputStream.chunks(maxLength:)`; every point where a request's code resumes is printed with
// its thread, and every one is the network thread (judged by pthread ids): no hop per read.
import Glibc
import Synchronization
import ThreadKit

extension ConcurrencyScenarios {
    static let asyncNetworkThread = Scenario(
        name: "async-network-thread",
        title: "the resident network thread as an async function: three requests, every resume on its thread",
        source:
            "Seed 001 (AFNetworking's networkRequestThread) as async/await: the thread's run loop as the task executor, its streams as async sequences"
    ) { say in
        let server = try TinyHTTPServer()
        defer { server.stop() }
        let ready = TKDispatchSemaphore(value: 0)
        let published = Mutex<(loop: TKRunLoop, pthread: pthread_t)?>(nil)
        let network = TKThread(name: "AFNetworking") {
            let loop = TKRunLoop.current
            loop.add(TKMessagePort(), forMode: .default) // keeps the loop resident, as in the seed
            published.withLock { $0 = (loop, pthread_self()) }
            ready.signal()
            loop.run() // until stopped
        }
        network.isDetached = false
        network.start()
        ready.wait()
        let (loop, networkThread) = published.withLock { $0! }
        let port = server.port
        let lines = Lines()
        let offThread = Atomic<Int>(0)
        /// Where the request's code runs now, for the printout; counts any place off the thread.
        let here = { @Sendable () -> String in
            if pthread_equal(pthread_self(), networkThread) != 0 { return "\"\(TKThread.current.name ?? "?")\"" }
            offThread.add(1, ordering: .relaxed)
            return "ANOTHER THREAD (\(TKThread.current.name ?? "unnamed"))"
        }
        let paths = ["/slow/24000/3", "/slow/40000/4", "/bytes/90000"]
        let done = TKDispatchSemaphore(value: 0)
        let outcome = Mutex<Result<[Int], any Error>?>(nil)
        say.say("a task prefers the network thread's loop (withTaskExecutorPreference) and sends three requests at once:")
        Task {
            let result: Result<[Int], any Error>
            do {
                result = .success(
                    try await withTaskExecutorPreference(loop) { () async throws -> [Int] in
                        try await withThrowingTaskGroup(of: Int.self) { group in
                            for path in paths {
                                group.addTask { try await request(path, port: port, loop: loop, lines: lines, here: here) }
                            }
                            var sizes: [Int] = []
                            for try await size in group { sizes.append(size) }
                            return sizes
                        }
                    })
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        let finished = done.wait(until: .now + .seconds(30)) == .success
        loop.perform { TKRunLoop.current.stop() }
        network.join()
        for line in lines.all { say.say(line) }
        try say.check(finished, "the requests did not finish in 30 s")
        let sizes = try outcome.withLock { $0! }.get()
        let resumes = lines.all.count
        say.say("\(resumes) resumes in all, off the network thread: \(offThread.load(ordering: .relaxed))")
        try say.check(sizes.sorted() == [24_000, 40_000, 90_000], "bodies of \(sizes.sorted()) bytes")
        try say.check(offThread.load(ordering: .relaxed) == 0, "a request's code resumed off the network thread")
        return "3 requests served by async code on the network thread: \(resumes) resumes, all on that thread, bodies exact"
    }

    /// One request as straight-line async code on streams scheduled on `loop`: writes the request,
    /// reads the answer to its end (the server closes), prints the thread of every resume, and
    /// returns the body's size after checking every byte against the server's pattern.
    static func request(
        _ path: String, port: UInt16, loop: TKRunLoop, lines: Lines, here: @Sendable () -> String
    ) async throws -> Int {
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(port))
        input.schedule(in: loop, forMode: .default)
        output.schedule(in: loop, forMode: .default)
        defer {
            input.close()
            output.close()
        }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        try await output.write(request)
        lines.append("\(path): request written (\(request.count) bytes); resumed on \(here())")
        var answer: [UInt8] = []
        var chunks = 0
        for try await chunk in input.chunks(maxLength: 16_384) {
            chunks += 1
            answer += chunk
            lines.append("\(path): chunk \(chunks), \(chunk.count) bytes; resumed on \(here())")
        }
        lines.append("\(path): the end, \(answer.count) bytes; resumed on \(here())")
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let split = (0...max(0, answer.count - 4)).first(where: { Array(answer[$0..<min(answer.count, $0 + 4)]) == separator })
        else { throw ScenarioFailure("\(path): no end of the header in \(answer.count) bytes") }
        let head = String(decoding: answer[..<split], as: UTF8.self)
        let body = answer[(split + 4)...]
        guard head.hasPrefix("HTTP/1.0 200"), head.contains("Content-Length: \(body.count)") else {
            throw ScenarioFailure("\(path): answer \"\(head)\" with a body of \(body.count) bytes")
        }
        for (offset, byte) in body.enumerated() where byte != TinyHTTPServer.byte(at: offset) {
            throw ScenarioFailure("\(path): body byte \(offset) is wrong")
        }
        return body.count
    }
}
