// RunLoopScenarios: the seeds' run-loop scenarios (the CFRunLoop articles and the Threading
// Programming Guide's "Run Loops"): the observer trace of a loop with a repeating timer, a custom
// input source driven from another thread and the seed's full two-source demo, a slow timer
// handler whose missed fires are skipped, a timer handed to a thread subclass, a timer carrying
// userInfo, and common modes (a timer that keeps firing while the loop runs a tracking mode).
import ChildProcessRoles
import Synchronization
import ThreadKit

enum RunLoopScenarios {
    static let all: [Scenario] = [observerTrace, customSource, customSourceDemo, timerSkips, timerOnThread, timerUserInfo, commonModes]

    static let observerTrace = Scenario(
        name: "observer-trace", title: "an observer prints every activity of a loop with a repeating timer",
        source: "CFRunLoop article: CFRunLoopObserver on kCFRunLoopAllActivities with a 0.5 s timer (here 50 ms)"
    ) { say in
        // On a thread of its own: the main loop's default mode never runs out of work (it also
        // serves Dispatch's main queue and the main actor, as CoreFoundation's does), so it would
        // not return once the timer is gone.
        let outcome = SharedBox<(trace: [String], result: TKRunLoop.RunResult?)>(([], nil)) // the thread's, until joined
        let thread = TKThread(name: "observed") {
            let loop = TKRunLoop.current
            let trace = SharedBox<[String]>([]) // loop thread only
            let start = ContinuousClock.now
            @Sendable func stamp() -> String { "+\(Int(((ContinuousClock.now - start) / .milliseconds(1)).rounded())) ms" }
            let observer = TKRunLoopObserver(activities: .allActivities) { _, activity in
                trace.value.append("\(activity)")
                say.say("\(stamp()) observer: \(activity)")
            }
            let fires = SharedBox(0)
            let timer = TKTimer(interval: .milliseconds(50), repeats: true) { t in
                fires.value += 1
                trace.value.append("timer")
                say.say("\(stamp()) timer fired (\(fires.value))")
                if fires.value == 3 { t.invalidate() }
            }
            loop.add(observer, forMode: .default)
            loop.add(timer, forMode: .default)
            let result = loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
            loop.remove(observer, forMode: .default)
            outcome.value = (trace.value, result)
        }
        thread.isDetached = false
        thread.start()
        thread.join()
        let (trace, result) = outcome.value
        say.say("run returned .\(result.map { "\($0)" } ?? "?") once the timer was invalidated")
        let pass = ["beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer"]
        try say.check(trace == ["entry"] + pass + pass + pass + ["exit"], "unexpected trace \(trace)")
        return "entry, then per pass beforeTimers → beforeSources → beforeWaiting → (sleep) → afterWaiting → timer, then exit"
    }

    static let customSource = Scenario(
        name: "custom-source", title: "two threads pass work back and forth through custom input sources",
        source: "Threading Programming Guide, \"Defining a Custom Input Source\": signal the source, then wake its loop"
    ) { say in
        let rounds = 1_000
        let mainLoop = TKRunLoop.current
        let workerLoop = SharedBox<TKRunLoop?>(nil) // set once by the worker before `ready`
        let ready = TKCondition()
        let count = Atomic<Int>(0)
        let done = Atomic<Bool>(false)
        let toWorker = SharedBox<TKRunLoopSource?>(nil) // set before the worker starts
        // The main thread's source: the worker signals it and wakes the main loop.
        let toMain = TKRunLoopSource {
            let n = count.wrappingAdd(1, ordering: .relaxed).newValue
            if n <= 2 || n == rounds { say.say("main thread: source performed (round \(n)) → signal the worker's source, wake its loop") }
            if n == rounds {
                done.store(true, ordering: .relaxed)
                return
            }
            toWorker.value!.signal()
            workerLoop.value!.wakeUp()
        }
        toWorker.value = TKRunLoopSource {
            if count.load(ordering: .relaxed) < 2 {
                say.say("worker thread: source performed → signal the main source, wake the main loop")
            }
            toMain.signal()
            mainLoop.wakeUp()
        }
        mainLoop.add(toMain, forMode: .default)
        let worker = TKThread(name: "worker") {
            let loop = TKRunLoop.current
            loop.add(toWorker.value!, forMode: .default)
            ready.withLock {
                workerLoop.value = loop
                ready.signal()
            }
            while !done.load(ordering: .relaxed) { loop.run(mode: .default, before: .now + .milliseconds(100)) }
            toWorker.value!.invalidate()
        }
        worker.start()
        ready.withLock { while workerLoop.value == nil { ready.wait() } }
        toWorker.value!.signal()
        workerLoop.value!.wakeUp()
        let deadline = ContinuousClock.now + .seconds(30)
        while !done.load(ordering: .relaxed) && ContinuousClock.now < deadline {
            mainLoop.run(mode: .default, before: deadline)
        }
        workerLoop.value!.wakeUp()
        worker.join()
        toMain.invalidate()
        say.say("… \(count.load(ordering: .relaxed)) round trips between the two loops")
        try say.check(count.load(ordering: .relaxed) == rounds, "only \(count.load(ordering: .relaxed)) rounds completed")
        return "\(rounds) round trips, each a signal + wakeUp handled on the other thread's loop"
    }

    static let customSourceDemo = Scenario(
        name: "custom-source-demo",
        title: "the seed's two-source demo: main and secondary thread trade commands through buffers; a stop cancels",
        source:
            "CSDN run-loop article, \"自定义Run Loop事件源的实际运用\": schedule registers the source via performOnMainThread(waitUntilDone), command buffers, a 1 s timer, a Stop that cancels"
    ) { say in
        let rounds = 3
        let demo = CustomSourceDemo(rounds: rounds, interval: .seconds(1)) { say.say($0) }
        say.say("the main thread runs its loop; \(rounds) rounds, one second apart as in the seed, then a stop command")
        let (events, exit) = demo.run()
        if let failure = CustomSourceDemo.failure(events, secondaryExit: exit, rounds: rounds, interval: .seconds(1)) {
            throw ScenarioFailure(failure)
        }
        return "\(rounds) rounds main → secondary → main, each step on its own thread; the stop cancelled the source and its loop finished"
    }

    static let timerSkips = Scenario(
        name: "timer-skips", title: "a repeating timer whose handler is once slow skips the fires it missed",
        source: "CFRunLoop article: a 5 s timer whose handler takes 20 s does not fire three times in a row (here 20 ms / 70 ms)"
    ) { say in
        let loop = TKRunLoop.current
        let interval = Duration.milliseconds(20)
        let first = ContinuousClock.now + interval
        let fires = SharedBox<[Int]>([]) // slot numbers, loop thread only
        let timer = TKTimer(fireAt: first, interval: interval, repeats: true) { t in
            let slot = Int(((ContinuousClock.now - first) / interval).rounded(.down))
            fires.value.append(slot)
            say.say(
                "fire at slot \(slot) (+\(slot * 20) ms of the schedule)\(fires.value.count == 1 ? " — the handler now takes 70 ms" : "")")
            if fires.value.count == 1 { TKThread.sleep(for: .milliseconds(70)) }
            if fires.value.count == 4 { t.invalidate() }
        }
        loop.add(timer, forMode: .default)
        loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        say.say("slots 1, 2 and 3 passed during the slow handler: they were skipped, not fired late in a burst")
        try say.check(
            fires.value.count == 4 && fires.value[0] == 0 && fires.value[1] >= 4 && fires.value[2] > fires.value[1],
            "unexpected slots \(fires.value)")
        return "fired at slots \(fires.value.map(String.init).joined(separator: ", ")): the original schedule, missed slots dropped"
    }

    static let timerOnThread = Scenario(
        name: "timer-thread", title: "a timer made on the main thread, handed to a thread subclass, run there in the common modes for 5 s",
        source:
            "CSDN NSThread article: NSTimer(fireDate: now + 1, interval: 0.5) passed to CustomThread(myTimer:), addTimer(forMode: NSRunLoopCommonModes), runUntilDate(now + 5)"
    ) { say in
        // safety: its fields are immutable (`ranFor` is a box written by the thread, read after join).
        final class CustomThread: TKThread, @unchecked Sendable {
            let myTimer: TKTimer
            let say: Narrator
            /// How long run(until:) ran; written by the thread, read after join.
            let ranFor = SharedBox<Duration>(.zero)
            init(myTimer: TKTimer, say: Narrator) {
                self.myTimer = myTimer
                self.say = say
                super.init()
                name = "CustomThread"
            }
            override func main() {
                let runloop = TKRunLoop.current
                runloop.add(myTimer, forMode: .common)
                say.say(
                    "CustomThread.main(): timer added in .common; TKThread.isMultiThreaded() → \(TKThread.isMultiThreaded()); run(until: now + 5 s)"
                )
                let start = ContinuousClock.now
                runloop.run(until: start + .seconds(5))
                ranFor.value = ContinuousClock.now - start
            }
        }
        let created = ContinuousClock.now
        let fireDate = created + .seconds(1)
        let interval = Duration.milliseconds(500)
        let fires = SharedBox<[(at: Duration, thread: String)]>([]) // CustomThread only, read after join
        let myTimer = TKTimer(fireAt: fireDate, interval: interval, repeats: true) { _ in
            let at = ContinuousClock.now - created
            fires.value.append((at, TKThread.current.name ?? "?"))
            say.say("+\(Int(at / .milliseconds(1))) ms: Fire timer... (on \"\(TKThread.current.name ?? "?")\")")
        }
        say.say(
            "main thread: TKTimer(fireAt: now + 1 s, interval: 0.5 s, repeats: true) → CustomThread(myTimer:).start(), then wait for it")
        let customThread = CustomThread(myTimer: myTimer, say: say)
        customThread.start()
        customThread.join()
        myTimer.invalidate()
        let ranFor = customThread.ranFor.value
        say.say(
            "the thread's run(until:) returned after \(Int(ranFor / .milliseconds(1))) ms; the timer fired \(fires.value.count)× (slots at 1.0, 1.5 … 5.0 s)"
        )
        let early = fires.value.enumerated().filter { $0.element.at < .seconds(1) + interval * $0.offset }
        try say.check(
            !fires.value.isEmpty && fires.value.count <= 9 && fires.value.allSatisfy { $0.thread == "CustomThread" },
            "the timer fired \(fires.value.count)× or off the thread it was handed to")
        try say.check(early.isEmpty && ranFor >= .seconds(5), "a fire or the end of the run came early")
        return "\(fires.value.count) fires, all on CustomThread, none early; the loop ran its full 5 s"
    }

    static let timerUserInfo = Scenario(
        name: "timer-user-info", title: "a scheduled repeating timer carries userInfo to its handler",
        source: "CSDN NSThread article: scheduledTimerWithTimeInterval(0.5, …, userInfo: \"This is a arg\", repeats: true) (here 50 ms)"
    ) { say in
        // On a thread of its own: the main loop's default mode never runs out of work, so it would
        // not return once the timer is invalidated.
        let seen = SharedBox<[String]>([]) // the thread's, until joined
        let thread = TKThread(name: "timer") {
            TKTimer.scheduledTimer(withInterval: .milliseconds(50), repeats: true, userInfo: "This is a arg") { sender in
                let info = sender.userInfo as? String ?? "(no userInfo)"
                seen.value.append(info)
                say.say("Fire timer...\(info)")
                if seen.value.count == 3 { sender.invalidate() }
            }
            TKRunLoop.current.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        }
        say.say(
            "scheduledTimer(withInterval: 50 ms (the seed: 0.5 s), repeats: true, userInfo: \"This is a arg\") on a thread; invalidated after 3 fires"
        )
        thread.start()
        thread.join()
        try say.check(seen.value == Array(repeating: "This is a arg", count: 3), "the handler saw \(seen.value)")
        return "each fire read the timer's userInfo through the timer handed to the block"
    }

    static let commonModes = Scenario(
        name: "common-modes", title: "a timer in the common modes keeps firing while the loop runs a tracking mode",
        source: "CFRunLoop article: NSRunLoopCommonModes vs UITrackingRunLoopMode while a scroll view tracks"
    ) { say in
        let loop = TKRunLoop.current
        let tracking: TKRunLoop.Mode = "UITrackingRunLoopMode"
        loop.addCommonMode(tracking)
        let commonFires = SharedBox(0)
        let defaultFires = SharedBox(0)
        let commonTimer = TKTimer(interval: .milliseconds(10), repeats: true) { _ in commonFires.value += 1 }
        let defaultTimer = TKTimer(interval: .milliseconds(10), repeats: true) { _ in defaultFires.value += 1 }
        loop.add(commonTimer, forMode: .common)
        loop.add(defaultTimer, forMode: .default)
        say.say("timer A added to .common (default + \(tracking)); timer B added to .default only")
        loop.run(mode: tracking, for: .milliseconds(60), returnAfterSourceHandled: false)
        say.say("running \(tracking) for 60 ms (the user is scrolling): A fired \(commonFires.value)×, B fired \(defaultFires.value)×")
        let (aTracking, bTracking) = (commonFires.value, defaultFires.value)
        loop.run(mode: .default, for: .milliseconds(60), returnAfterSourceHandled: false)
        say.say("running .default for 60 ms: A fired \(commonFires.value - aTracking)× more, B \(defaultFires.value - bTracking)×")
        commonTimer.invalidate()
        defaultTimer.invalidate()
        try say.check(aTracking > 0 && bTracking == 0 && defaultFires.value > 0, "common modes did not behave")
        return "the common-mode timer fired in both modes; the default-mode timer waited for the default mode"
    }
}
