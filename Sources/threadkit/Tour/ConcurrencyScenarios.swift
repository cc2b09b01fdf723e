// ConcurrencyScenarios: ThreadKit inside today's Swift (docs/Concurrency.md). The main thread runs
// TKRunLoop.main and serves ThreadKit's main queue, Dispatch's main queue and the main actor; the
// seeds' resident network thread becomes an actor pinned to its run loop; the pool becomes Swift's
// global executor (in a child process: the install must come first thing in a process).
import ChildProcessRoles
import Dispatch
import Glibc
import Synchronization
import ThreadKit

enum ConcurrencyScenarios {
    static let all: [Scenario] = [mainActor, actorOnRunLoop, asyncNetworkThread, globalExecutor]

    static let mainActor = Scenario(
        name: "main-actor", title: "TKRunLoop.main serves TKDispatchQueue.main, DispatchQueue.main and @MainActor work",
        source: "Run-loop article: the main thread's loop runs the main queue (GCD's main queue is drained by the main run loop)"
    ) { say in
        let lines = Lines()
        let note = { @Sendable (line: String) in lines.append("\(line) — on the main thread: \(TKThread.isMainThread)") }
        let background = TKThread(name: "submitter") {
            TKDispatchQueue.main.async { note("1. TKDispatchQueue.main.async block") }
            DispatchQueue.main.async { note("2. DispatchQueue.main.async block (how Foundation and NIO reach the main thread)") }
            Task { @MainActor in note("3. Task { @MainActor } job") }
            Task.detached {
                let answer = await MainActor.run { () -> String in
                    note("4. await MainActor.run from a detached task")
                    return "main"
                }
                lines.append(
                    "5. back in the detached task (off the main thread: \(!TKThread.isMainThread)) with the answer \"\(answer)\"; it stops the main loop"
                )
                await MainActor.run { TKRunLoop.main.stop() }
            }
        }
        background.start()
        // A TKRunLoop.main timer callout is on the main actor too.
        let assumed = Mutex(false)
        TKRunLoop.main.add(
            TKTimer(fireAt: .now, interval: .zero, repeats: false) { _ in
                MainActor.assumeIsolated { assumed.withLock { $0 = true } }
            }, forMode: .default)
        say.say("the main thread calls TKRunLoop.main.run(); a thread sends work through all three paths")
        let started = ContinuousClock.now
        TKRunLoop.main.run()
        let got = lines.all
        for line in got { say.say(line) }
        say.say("MainActor.assumeIsolated inside a TKRunLoop.main timer callout: \(assumed.withLock { $0 } ? "holds" : "FAILED")")
        say.say("the loop returned when stopped, after \(ContinuousClock.now - started)")
        try say.check(
            got.count == 5 && got.prefix(4).allSatisfy { $0.hasSuffix("true") } && assumed.withLock { $0 },
            "not every kind of work ran on the main thread")
        return "all three kinds of main-thread work ran on the main thread under TKRunLoop.main"
    }

    /// Lines written by several threads, read at the end.
    final class Lines: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    /// The seeds' resident network thread (AFNetworking's networkRequestThread) as an actor: its
    /// state lives on the thread's run loop, and callers reach it with `await`.
    actor NetworkClient {
        let loop: TKRunLoop
        private var served: [String] = []
        init(loop: TKRunLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

        func request(_ path: String) -> String {
            served.append(path)
            return "\(path) served on thread \"\(TKThread.current.name ?? "?")\" (request #\(served.count))"
        }

        var count: Int { served.count }
    }

    static let actorOnRunLoop = Scenario(
        name: "actor-on-runloop", title: "the resident network thread as an actor pinned to its run loop",
        source: "Run-loop article, AFNetworking: networkRequestThread, a resident thread whose loop serves every connection"
    ) { say in
        let ready = TKDispatchSemaphore(value: 0)
        let loopBox = Mutex<TKRunLoop?>(nil)
        let network = TKThread(name: "AFNetworking") {
            let loop = TKRunLoop.current
            loop.add(TKMessagePort(), forMode: .default) // keeps the loop resident, as in the seed
            loopBox.withLock { $0 = loop }
            ready.signal()
            loop.run()
        }
        network.start()
        ready.wait()
        let client = NetworkClient(loop: loopBox.withLock { $0! })
        let done = TKDispatchSemaphore(value: 0)
        let replies = Lines()
        Task {
            await withTaskGroup(of: String.self) { group in
                for i in 1...4 { group.addTask { await client.request("/photos/\(i)") } }
                for await reply in group { replies.append(reply) }
            }
            done.signal()
        }
        try say.check(done.wait(until: .now + .seconds(10)) == .success, "the actor's calls did not finish")
        for line in replies.all.sorted() { say.say(line) }
        // Code the loop runs itself (a perform request, as performSelector:onThread: would) may
        // touch the actor's state synchronously: the loop's thread is the actor's context.
        let count = Mutex(0)
        try network.perform(waitUntilDone: true) { count.withLock { $0 = client.assumeIsolated { $0.count } } }
        say.say("a perform block on the network thread read the actor's state without await: \(count.withLock { $0 }) requests")
        try say.check(
            count.withLock { $0 } == 4 && replies.all.allSatisfy { $0.contains("\"AFNetworking\"") },
            "a call ran off the network thread")
        return "4 concurrent calls ran one at a time on the network thread's run loop"
    }

    static let globalExecutor = Scenario(
        name: "global-executor", title: "ThreadKit's pool as Swift concurrency's global executor (100,000 tasks)",
        source: "GCD article: the global queues run everyone's work; here they also run Swift's tasks"
    ) { say in
        say.say("a child process calls TKConcurrency.installGlobalExecutor() first thing, then runs 100,000 tasks:")
        let status = try ChildLauncher("global-executor", ["100000"]).wait()
        say.say("a child that starts a Task before installing is refused:")
        let late = try ChildLauncher("global-executor-too-late", []).wait()
        try say.check(status == 0 && late == 0, "child statuses \(status), \(late)")
        return "every task ran on a pool worker; a late install was refused with .tooLate"
    }
}
