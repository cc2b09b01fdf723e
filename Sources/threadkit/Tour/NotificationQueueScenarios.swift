// NotificationQueueScenarios: the seeds' idle-time notifications (NSNotificationQueue with
// NSPostWhenIdle, for short low-priority work done when the application is idle): the same event
// enqueued many times in one pass posts once, when the loop is about to wait; .asap ones post
// before .whenIdle ones, each in the order they were enqueued.
import ChildProcessRoles
import ThreadKit

enum NotificationQueueScenarios {
    static let all: [Scenario] = [idleCoalescing]

    static let idleCoalescing = Scenario(
        name: "idle-coalescing", title: "idle-time notifications enqueued 5× in one pass post once; asap goes before whenIdle",
        source: "CSDN 多线程 article, \"Idle-time notification\": NSNotificationQueue with NSPostWhenIdle, coalesced on name and sender"
    ) { say in
        final class Document: Sendable {}
        let document = Document()
        let changed: TKNotification.Name = "DocumentChanged"
        let finished: TKNotification.Name = "TourFinished"
        let loop = TKRunLoop.current
        let queue = TKNotificationQueue.default // this thread's queue, posting to TKNotificationCenter.default
        let center = TKNotificationCenter.default
        let log = SharedBox<[String]>([]) // loop thread only
        let token = center.addObserver(forName: nil, object: nil) { note in
            guard note.name != finished else {
                loop.stop()
                return
            }
            let label = (note.userInfo?["label"] as? String) ?? "?"
            log.value.append("\(note.name) \(label)")
            say.say("  ← posted: \(note.name) (\(label))")
        }
        // Order .min: it speaks before the queue's own observer posts.
        let trace = TKRunLoopObserver(activities: [.beforeTimers, .beforeWaiting], order: .min) { _, activity in
            say.say("loop: \(activity == .beforeWaiting ? "beforeWaiting — about to sleep" : "beforeTimers — a pass begins")")
        }
        let keepAlive = TKRunLoopSource {}
        loop.add(keepAlive, forMode: .default)
        loop.add(trace, forMode: .default)
        defer {
            trace.invalidate()
            keepAlive.invalidate()
            center.removeObserver(token)
        }
        @Sendable func post(
            _ name: TKNotification.Name, _ label: String, _ style: TKNotificationQueue.PostingStyle,
            mask: TKNotificationQueue.Coalescing = [.onName, .onSender]
        ) {
            say.say("enqueue \(name) (\(label)) .\(style)\(mask.isEmpty ? ", no coalescing" : "")")
            queue.enqueue(
                TKNotification(name: name, object: document, userInfo: ["label": label]),
                postingStyle: style, coalesceMask: mask)
        }

        say.say("1. a perform block (one pass) enqueues DocumentChanged 5 times, .whenIdle, same name and sender:")
        loop.perform {
            for edit in 1...5 { post(changed, "edit \(edit)", .whenIdle) }
            queue.enqueue(TKNotification(name: finished), postingStyle: .whenIdle)
        }
        var result = loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        let coalesced = log.value
        say.say("→ \(coalesced.count) post for 5 enqueues: the first one was kept, the other four merged into it")
        try say.check(result == .stopped && coalesced == ["DocumentChanged edit 1"], "expected one post of edit 1, got \(coalesced)")

        log.value = []
        say.say("2. one block enqueues .whenIdle, then three .asap (distinct, no coalescing):")
        loop.perform {
            post("Idle", "enqueued 1st", .whenIdle)
            for n in 1...3 { post("Asap", "asap \(n), enqueued \(n + 1)\(n == 1 ? "nd" : n == 2 ? "rd" : "th")", .asap, mask: []) }
            queue.enqueue(TKNotification(name: finished), postingStyle: .whenIdle)
        }
        result = loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        let order = log.value
        say.say(
            "→ the .asap ones post first, in the order enqueued (Foundation on Linux reverses them); .whenIdle last, as the loop is about to sleep"
        )
        try say.check(
            result == .stopped
                && order.map { $0.split(separator: ",")[0] }
                    == ["Asap asap 1", "Asap asap 2", "Asap asap 3", "Idle enqueued 1st"],
            "unexpected order \(order)")
        return "5 idle-time enqueues → 1 post at beforeWaiting; asap 1, 2, 3 then the idle one"
    }
}
