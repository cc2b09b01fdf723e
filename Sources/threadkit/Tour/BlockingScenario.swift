// BlockingScenario: blocking in the wrong place (docs/Diagnostics.md §5). A Swift task refreshes a
// cache under a TKLock that another thread holds: the task's cooperative-pool thread sleeps in the
// kernel, and every other task queued behind it waits — silent starvation, no crash, no hang
// report. With `TK_DIAGNOSTICS=blocking` the wait is reported once, at its call site, with what it
// starves; the same wait on a plain thread is fine and is not reported.
import ChildProcessRoles
import ThreadKit

extension DiagnosticsScenarios {
    static let blocking = Scenario(
        name: "blocking", title: "Blocking in the wrong place: a Swift task waiting for a lock, reported at its call site",
        source: "livekit Swift SDK issue 1100, swift-subprocess PR 158: a blocking wait on Swift's cooperative pool starves "
            + "every task behind it; Xcode's Thread Performance Checker reports this on Apple platforms only"
    ) { say in
        let wasOn = TKDiagnostics.features
        let printed = TKDiagnostics.printsReports
        TKDiagnostics.enable(.blocking)
        TKDiagnostics.printsReports = false
        let reported = TKDispatchSemaphore(value: 0)
        TKDiagnostics.setBlockingHandler { _ in reported.signal() }
        defer {
            TKDiagnostics.setBlockingHandler(nil)
            TKDiagnostics.printsReports = printed
            if !wasOn.contains(.blocking) { TKDiagnostics.disable(.blocking) }
        }
        let before = TKDiagnostics.blockingReports.count
        let cache = TKLock()
        cache.name = "cache"

        say.say("a plain thread holds lock \"cache\" (a slow refresh)")
        let holding = TKDispatchSemaphore(value: 0)
        let holder = SpawnedThread {
            cache.lock()
            holding.signal()
            _ = reported.wait(until: .now + .seconds(30)) // released once the task's wait is reported
            cache.unlock()
        }
        holding.wait()
        say.say("a Swift task calls cache.lock(): it parks its cooperative-pool thread")
        let taskDone = TKDispatchSemaphore(value: 0)
        Task.detached {
            DiagnosticsScenarios.readCacheInATask(cache)
            taskDone.signal()
        }
        let finished = taskDone.wait(until: .now + .seconds(30)) == .success
        holder.join()

        say.say("the same lock() on a plain thread: a thread of its own may block, nothing is reported")
        SpawnedThread { DiagnosticsScenarios.readCacheInATask(cache) }.join()

        let found = Array(TKDiagnostics.blockingReports.dropFirst(before))
        for line in (found.first?.description ?? "(no report)").split(separator: "\n").prefix(8) { say.say("│ \(line)") }
        try say.check(finished, "the task never got the lock")
        try say.check(found.count == 1, "expected one report, got \(found.count)")
        try say.check(found[0].place == .swiftConcurrencyJob, "the report places the wait at \(found[0].place)")
        try say.check(found[0].callSite.contains("readCacheInATask"), "the call site is not readCacheInATask: \(found[0].callSite)")
        return "the task's lock() was reported once, at readCacheInATask, as starving \(found[0].starves)"
    }

    /// The call site the report names: a cache read under `cache`.
    @inline(never)
    static func readCacheInATask(_ cache: TKLock) {
        cache.lock()
        cache.unlock()
    }
}
