// PerformScenarios: performSelector:onThread: and friends (SPEC §3) from the seeds' NSThread
// article: work sent to a thread that keeps its run loop alive, an answer sent back to the main
// thread, a delayed request cancelled before it runs, and a request to a finished thread refused.
import ChildProcessRoles
import Synchronization
import ThreadKit

enum PerformScenarios {
    static let all: [Scenario] = [performOnThread]

    static let performOnThread = Scenario(
        name: "perform-requests", title: "perform-on-thread: a worker's run loop runs requests in order; answers go to the main thread",
        source:
            "CSDN NSThread article: performSelector:onThread:withObject:waitUntilDone:, performSelectorOnMainThread, cancelPreviousPerformRequests"
    ) { say in
        let stop = Atomic<Bool>(false)
        let worker = TKThread(name: "worker") {
            let loop = TKRunLoop.current
            loop.add(TKRunLoopSource {}, forMode: .default) // keeps the loop alive between requests
            while !stop.load(ordering: .relaxed) { loop.run(mode: .default, before: .now + .milliseconds(50)) }
        }
        worker.start()
        while !worker.isExecuting { TKThread.sleep(for: .milliseconds(1)) }
        let log = SharedBox<[String]>([]) // worker thread only until the waiting request returns
        for n in 1...3 {
            try worker.perform { log.value.append("request \(n) on \(TKThread.current.name ?? "?")") }
        }
        try worker.perform(waitUntilDone: true) { log.value.append("waiting request on \(TKThread.current.name ?? "?")") }
        for line in log.value { say.say(line) }
        try say.check(log.value.count == 4 && log.value[0].hasPrefix("request 1"), "requests lost or out of order")

        let answered = Atomic<Bool>(false)
        try worker.perform {
            TKThread.performOnMainThread { answered.store(TKThread.isMainThread, ordering: .relaxed) }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while !answered.load(ordering: .relaxed) && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(10))
        }
        say.say("worker → performOnMainThread: ran on the main thread → \(answered.load(ordering: .relaxed))")

        final class Target: Sendable {}
        let target = Target()
        let delayedRan = SharedBox(false)
        TKRunLoop.current.perform(afterDelay: .milliseconds(20), inModes: ["tour"], target: target, key: "refresh") {
            delayedRan.value = true
        }
        TKRunLoop.cancelPreviousPerformRequests(withTarget: target, key: "refresh")
        TKRunLoop.current.run(mode: "tour", for: .milliseconds(40), returnAfterSourceHandled: false)
        say.say("perform(afterDelay: 20 ms, target:, key: \"refresh\") then cancelPreviousPerformRequests → ran: \(delayedRan.value)")

        stop.store(true, ordering: .relaxed)
        worker.join()
        var refused = false
        do { try worker.perform {} } catch let error as TKError { refused = error.code == .threadFinished }
        say.say("a request to the finished worker → throws TKError(.threadFinished): \(refused)")
        try say.check(answered.load(ordering: .relaxed) && !delayedRan.value && refused, "perform requests misbehaved")
        return "4 requests ran in order on the worker, the answer reached the main thread, the cancelled one never ran"
    }
}
