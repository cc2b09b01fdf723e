import ChildProcessRoles
import Glibc
// ThreadScenarios: the seeds' NSThread scenarios (the CSDN NSThread article, "Runloop和多線程",
// and the Threading Programming Guide's "Thread Management"): three ways to create a thread, the
// detached-thread pitfall and its joinable fix, the thread dictionary, Listing 2-3's exit through
// an input source and the thread dictionary, quality of service, and an error thrown in a thread
// forwarded to the main thread.
import Synchronization
import ThreadKit

enum ThreadScenarios {
    static let all: [Scenario] = [createThreads, detachedPitfall, threadDictionary, exitNow, qualityOfService, threadError]

    static let createThreads = Scenario(
        name: "create-threads",
        title: "four ways to create a thread: detach, object + start, subclass with two arguments, performInBackground",
        source:
            "CSDN NSThread article: detachNewThreadSelector, initWithTarget + start, NSThread subclass, performSelectorInBackground; isMultiThreaded"
    ) { say in
        let before = TKThread.isMultiThreaded()
        say.say(
            "TKThread.isMultiThreaded() before any thread is started → \(before)"
                + (before && !say.runsFirst ? " (an earlier scenario of this run started threads)" : ""))
        let done = TKCondition()
        let ran = SharedBox<[String]>([]) // guarded by done
        @Sendable func report(_ line: String) {
            done.withLock {
                ran.value.append(line)
                done.signal()
            }
            say.say(line)
        }
        TKThread.detachNewThread(name: "detached") {
            report("1. detachNewThread: running on \"\(TKThread.current.name ?? "?")\"")
        }
        done.withLock { while ran.value.count < 1 { done.wait() } }
        let object = TKThread(name: "object") {
            report("2. TKThread(name:block:) + start(): running on \"\(TKThread.current.name ?? "?")\"")
        }
        object.start()
        object.join()
        // safety: its fields are immutable.
        final class Downloader: TKThread, @unchecked Sendable {
            let url: String, retries: Int
            let report: @Sendable (String) -> Void
            init(url: String, retries: Int, report: @escaping @Sendable (String) -> Void) {
                self.url = url
                self.retries = retries
                self.report = report
                super.init()
                name = "downloader"
            }
            override func main() {
                report("3. subclass Downloader(url: \(url), retries: \(retries)).main() on \"\(TKThread.current.name ?? "?")\"")
            }
        }
        let subclass = Downloader(url: "https://example.com/a.png", retries: 2) { report($0) }
        subclass.start()
        subclass.join()
        say.say("First event in Main Thread.")
        let background = TKThread.performInBackground {
            report(
                "4. performInBackground: \"I am a event, perform in Background Thread.\" on \"\(TKThread.current.name ?? "?")\", "
                    + "main thread? \(TKThread.isMainThread)")
        }
        done.withLock { while ran.value.count < 4 { done.wait() } }
        say.say("Second event in Main Thread. (performInBackground's thread is detached: \(background.isDetached))")
        let after = TKThread.isMultiThreaded()
        say.say("TKThread.isMultiThreaded() after → \(after)")
        let count = done.withLock { ran.value.count }
        try say.check(count == 4, "expected 4 threads to run, saw \(count)")
        try say.check(
            background.isDetached && done.withLock { ran.value[3].hasSuffix("main thread? false") },
            "performInBackground did not run on a detached secondary thread")
        try say.check(after && (!before || !say.runsFirst), "isMultiThreaded() was \(before) before and \(after) after the first threads")
        return "all four forms ran their code on their own, named threads; isMultiThreaded() went \(before) → \(after)"
    }

    static let detachedPitfall = Scenario(
        name: "detached-pitfall", title: "the main thread returns before a detached thread is done; a joinable thread fixes it",
        source: "CSDN NSThread article and Threading Programming Guide: detached vs joinable threads, saving data at exit"
    ) { say in
        let path = "/tmp/threadkit-tour-save-\(getpid()).txt"
        defer { unlink(path) }
        say.say("child process 1: main starts a DETACHED saver thread (20 chunks, 10 ms apart) and returns")
        let pitfall = try ChildLauncher("detached-pitfall", [path]).wait()
        let partial = chunksWritten(path)
        say.say("  exit status \(pitfall); chunks saved: \(partial) of 20 — the process ended under the thread")
        say.say("child process 2: the same with a JOINABLE saver (isDetached = false)")
        let fixed = try ChildLauncher("joinable-save", [path]).wait()
        let complete = chunksWritten(path)
        say.say("  exit status \(fixed); chunks saved: \(complete) of 20 — exit waited for the joinable thread")
        try say.check(pitfall == 0 && fixed == 0, "a child failed")
        try say.check(partial < 20, "the detached thread was waited for")
        try say.check(complete == 20, "the joinable thread's save was cut off")
        return "detached: \(partial)/20 chunks saved; joinable: 20/20"
    }

    static func chunksWritten(_ path: String) -> Int {
        guard let file = fopen(path, "r") else { return 0 }
        defer { fclose(file) }
        var lines = 0
        while true {
            let c = fgetc(file)
            if c == EOF { break }
            if c == 10 { lines += 1 }
        }
        return lines
    }

    static let threadDictionary = Scenario(
        name: "thread-dictionary", title: "each thread's own dictionary",
        source: "Threading Programming Guide, \"Configuring Thread-Local Storage\"; NSThread.threadDictionary"
    ) { say in
        TKThread.current.threadDictionary["role"] = "main"
        let seen = SharedBox<[String]>([]) // written by each thread before it finishes
        let workers = ["parser", "renderer"].map { role in
            TKThread(name: role) {
                TKThread.current.threadDictionary["role"] = role
                TKThread.current.threadDictionary["started"] = 1
                let value = TKThread.current.threadDictionary["role"] as? String ?? "?"
                say.say("thread \"\(TKThread.current.name ?? "?")\": threadDictionary[\"role\"] = \(value)")
                seen.value.append(value)
            }
        }
        for w in workers {
            w.start()
            w.join()
        }
        let mine = TKThread.current.threadDictionary["role"] as? String ?? "?"
        say.say("main thread: threadDictionary[\"role\"] = \(mine)")
        TKThread.current.threadDictionary["role"] = nil
        try say.check(seen.value == ["parser", "renderer"] && mine == "main", "dictionaries leaked between threads")
        return "each thread saw only its own entries"
    }

    static let exitNow = Scenario(
        name: "thread-exit-now", title: "Listing 2-3: a worker runs its loop briefly between work chunks and exits through an input source",
        source:
            "Threading Programming Guide, \"Terminating a Thread\", Listing 2-3: runUntilDate:[NSDate date] after each chunk; ThreadShouldExitNow in the thread dictionary"
    ) { say in
        let totalChunks = 1_000_000
        let chunksDone = Atomic<Int>(0)
        let registered = TKCondition()
        let workerLoop = SharedBox<TKRunLoop?>(nil) // guarded by registered
        let performed = SharedBox<(thread: String, afterChunk: Int)?>(nil) // written by the worker's loop, read after join
        // myInstallCustomInputSource: the source registers its loop when scheduled; its handler
        // cannot reach the worker's local `exitNow`, so it leaves the request in the thread dictionary.
        let exitSource = TKRunLoopSource(
            schedule: { loop, mode in
                say.say(
                    "worker: input source scheduled in \(mode == .default ? "the default mode" : mode.rawValue) → its loop is registered with the main thread"
                )
                registered.withLock {
                    workerLoop.value = loop
                    registered.signal()
                }
            },
            perform: {
                TKThread.current.threadDictionary["ThreadShouldExitNow"] = true
                performed.value = (TKThread.current.name ?? "?", chunksDone.load(ordering: .relaxed))
                say.say(
                    "worker: input source performed after chunk \(performed.value!.afterChunk) → threadDictionary[\"ThreadShouldExitNow\"] = true"
                )
            })
        let outcome = SharedBox<(chunks: Int, exitNow: Bool)>((0, false)) // the worker's, until joined
        let worker = TKThread(name: "worker") {
            var moreWorkToDo = true
            var exitNow = false
            let runLoop = TKRunLoop.current
            TKThread.current.threadDictionary["ThreadShouldExitNow"] = exitNow
            runLoop.add(exitSource, forMode: .default)
            var chunks = 0
            while moreWorkToDo && !exitNow {
                doChunkOfWork()
                chunks += 1
                chunksDone.store(chunks, ordering: .relaxed)
                moreWorkToDo = chunks < totalChunks
                // Run the loop, but time out at once if the input source is not waiting to fire.
                runLoop.run(until: .now)
                exitNow = TKThread.current.threadDictionary["ThreadShouldExitNow"] as? Bool ?? false
                if chunks <= 2 { say.say("worker: chunk \(chunks) done; run(until: .now) → exitNow \(exitNow), back to work") }
            }
            exitSource.invalidate()
            outcome.value = (chunks, exitNow)
        }
        worker.isDetached = false
        worker.start()
        let loop = registered.withLock { () -> TKRunLoop in
            while workerLoop.value == nil { registered.wait() }
            return workerLoop.value!
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while chunksDone.load(ordering: .relaxed) < 20 && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(1)) }
        let sentAfter = chunksDone.load(ordering: .relaxed)
        say.say("main thread: the worker has done \(sentAfter) chunks; signal its input source and wake its loop")
        exitSource.signal()
        loop.wakeUp()
        worker.join()
        let (chunks, exitNow) = outcome.value
        say.say(
            "worker left its loop after chunk \(chunks) of \(totalChunks) with exitNow \(exitNow); the handler ran on \"\(performed.value?.thread ?? "?")\""
        )
        try say.check(exitNow && performed.value?.thread == "worker", "the exit request did not reach the worker through its input source")
        try say.check(
            performed.value!.afterChunk >= sentAfter && chunks == performed.value!.afterChunk,
            "the source performed after chunk \(performed.value!.afterChunk) but the worker stopped after chunk \(chunks)")
        return
            "the request was handled in the brief run after chunk \(chunks) and the worker stopped there, cleanly, through its thread dictionary"
    }

    /// One chunk of a larger body of work: a few microseconds of arithmetic.
    static func doChunkOfWork() {
        var x: UInt64 = 88_172_645_463_325_252
        for _ in 0..<2_000 {
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
        }
        if x == 0 { Console.out("unreachable") }
    }

    static let qualityOfService = Scenario(
        name: "qos", title: "quality of service changes the OS scheduling of the thread",
        source: "Threading Programming Guide, \"Configuring Thread Priority\"; NSThread.qualityOfService"
    ) { say in
        var ok = true
        let classes: [(TKQualityOfService, String)] = [(.utility, "utility"), (.default, "default"), (.background, "background")]
        for (qos, label) in classes {
            let seen = SharedBox<(Int32, Int32)>((0, 0)) // written by the thread before it finishes
            let t = TKThread(name: label) { seen.value = (getpriority(__priority_which_t(0), 0), sched_getscheduler(0)) }
            t.qualityOfService = qos
            t.start()
            t.join()
            let policy = seen.value.1 == 3 ? "SCHED_BATCH" : seen.value.1 == 0 ? "SCHED_OTHER" : "policy \(seen.value.1)"
            say.say("qualityOfService = .\(label): the thread runs at nice \(seen.value.0), \(policy)")
            let expected: Int32 = qos == .utility ? 5 : qos == .background ? 10 : 0
            ok = ok && seen.value.0 == expected
        }
        say.say("(Foundation's Thread on Linux stores the QoS but runs every thread at nice 0)")
        try say.check(ok, "a QoS class was not applied")
        return "utility → nice 5, default → nice 0, background → nice 10 with SCHED_BATCH"
    }

    static let threadError = Scenario(
        name: "thread-error", title: "an error thrown in a thread is forwarded to the main thread",
        source: "Threading Programming Guide, \"Handling Exceptions\": catch in the thread, hand it to the main thread"
    ) { say in
        struct DownloadFailed: Error, CustomStringConvertible {
            let url: String
            var description: String { "DownloadFailed(\(url))" }
        }
        let mailbox = TKCondition()
        let received = SharedBox<(String, String)?>(nil) // guarded by mailbox
        let previous = TKThread.uncaughtErrorHandler
        TKThread.uncaughtErrorHandler = { thread, error in
            say.say("uncaughtErrorHandler on \"\(TKThread.current.name ?? "?")\": forwarding \(error) to the main thread")
            mailbox.withLock {
                received.value = (thread.name ?? "?", "\(error)")
                mailbox.signal()
            }
        }
        defer { TKThread.uncaughtErrorHandler = previous }
        let worker = TKThread(name: "download", throwing: { throw DownloadFailed(url: "https://example.com/big.zip") })
        worker.start()
        let (from, error) = mailbox.withLock { () -> (String, String) in
            while received.value == nil { mailbox.wait() }
            return received.value!
        }
        say.say("main thread (isMainThread \(TKThread.isMainThread)): received \(error) from \"\(from)\"; the process keeps running")
        worker.join()
        try say.check(from == "download" && error.contains("big.zip") && TKThread.isMainThread, "the error was not forwarded")
        return "the thread's error reached the main thread; nothing crashed"
    }
}
