// CustomSourceDemo: the seed's full custom-input-source demo ("自定义Run Loop事件源的实际运用",
// the CSDN run-loop article), for the `custom-source-demo` scenario and the child role of the same
// name. Two sources, one on the main thread and one on a secondary thread, pass commands through
// each other's command buffers:
//   1. The main source is added to the main loop; its schedule callback registers its context
//      (loop + source) with the registry (the seed's AppDelegate), on the main thread.
//   2. The secondary thread adds its source to its loop; the schedule callback registers that
//      context on the main thread (perform on main, waiting until done), and the registration sends
//      the first command: the main context, appended to the secondary buffer, signal, wake.
//   3. The secondary perform does the work (the seed's generateRandomAlpha) and answers the same
//      way into the main buffer; the main perform "reloads the display" and arms a 1 s one-shot
//      timer on the main loop that sends the next command (the seed re-arms it every round).
//   4. After the last round the main thread sends a stop command instead: the secondary perform
//      invalidates its source, whose cancel callback unregisters it on the main thread; the
//      secondary loop is then empty, its run returns .finished and the thread ends.
// `run()` is called on the main thread and runs the main loop until the secondary source is
// unregistered. Who touches what: `registry` only on the main thread; each buffer under its lock;
// `events` under `eventsLock`.
import ChildProcessRoles
import Glibc
import ThreadKit

// safety: `registry` is touched on the main thread only, each buffer under its lock, `events`
// under `eventsLock` (see the header).
final class CustomSourceDemo: @unchecked Sendable {
    enum Command: Sendable { case work(round: Int, replyTo: SourceContext), stop }

    /// A source and the loop it was scheduled on (the seed's …RunLoopSourceContext).
    struct SourceContext: Sendable {
        let loop: TKRunLoop
        let source: CommandSource
    }

    // safety: `source` is set in init; `context` only on the owning loop's thread; `buffer` under
    // `bufferLock`.
    /// The seed's MainThreadRunLoopSource / SecondaryThreadRunLoopSource: a version-0 source with
    /// a command buffer. `context` is set once by the schedule callback, on the source's own thread.
    final class CommandSource: @unchecked Sendable {
        private(set) var source: TKRunLoopSource! // set in init, immutable after
        private(set) var context: SourceContext? // the owning loop's thread only
        private let bufferLock = TKLock()
        private var buffer: [Command] = [] // guarded by bufferLock

        init(
            schedule: @escaping @Sendable (SourceContext) -> Void,
            cancel: @escaping @Sendable (SourceContext) -> Void,
            perform: @escaping @Sendable (CommandSource, [Command]) -> Void
        ) {
            source = TKRunLoopSource(
                schedule: { [unowned self] loop, _ in
                    let context = SourceContext(loop: loop, source: self)
                    self.context = context
                    schedule(context)
                },
                cancel: { [unowned self] loop, _ in
                    cancel(SourceContext(loop: loop, source: self))
                },
                perform: { [unowned self] in
                    perform(
                        self,
                        bufferLock.withLock {
                            defer { buffer.removeAll() }
                            return buffer
                        })
                })
        }

        /// Marks the source with nothing in its buffer: its loop's run returns after a no-op perform.
        func poke() { source.signal() }

        /// Appends a command, marks the source and wakes its loop (the seed's
        /// commandBuffer.append + signalSourceAndWakeUpRunloop).
        func send(_ command: Command, to loop: TKRunLoop) {
            bufferLock.withLock { buffer.append(command) }
            source.signal()
            loop.wakeUp()
        }
    }

    /// What happened, for the verdict. `onMain` is judged with pthread_equal against the thread
    /// that called `run()`, independently of TKThread.isMainThread.
    struct Event: Sendable {
        let what: String
        let round: Int
        let onMain: Bool
        let at: Duration
    }

    let rounds: Int
    let interval: Duration
    private let say: @Sendable (String) -> Void
    private let start = ContinuousClock.now
    private var mainPthread = pthread_self() // set by run(), before any thread is started
    private let eventsLock = TKLock()
    private var events: [Event] = [] // guarded by eventsLock
    // The registry (the seed's AppDelegate): main thread only.
    private var mainContext: SourceContext?
    private var secondaryContext: SourceContext?
    private var round = 0
    private var finished = false

    init(rounds: Int, interval: Duration, say: @escaping @Sendable (String) -> Void) {
        self.rounds = rounds
        self.interval = interval
        self.say = say
    }

    private func record(_ what: String, _ round: Int) {
        let event = Event(
            what: what, round: round, onMain: pthread_equal(pthread_self(), mainPthread) != 0, at: ContinuousClock.now - start)
        eventsLock.withLock { events.append(event) }
    }

    private var stamp: String { "+\(Int((ContinuousClock.now - start) / .milliseconds(1))) ms" }

    /// Runs the demo on the main thread; returns the events and how the secondary loop ended.
    func run() -> (events: [Event], secondaryExit: TKRunLoop.RunResult?) {
        mainPthread = pthread_self()
        let mainSource = CommandSource(
            schedule: { [self] context in
                record("register main", 0)
                mainContext = context // already on the main thread
                say("\(stamp) main source scheduled on the main loop → registered")
            },
            cancel: { [self] _ in
                record("cancel main", 0)
                say("\(stamp) main source cancelled: removed from the main loop")
            },
            perform: { [self] _, commands in
                performMainTask(commands)
            })
        TKRunLoop.current.add(mainSource.source, forMode: .default)

        let secondaryExit = SharedBox<TKRunLoop.RunResult?>(nil) // the secondary thread's, until joined
        let secondary = TKThread(name: "secondary") { [self] in
            let source = CommandSource(
                schedule: { [self] context in
                    say("\(stamp) secondary source scheduled on its loop → perform on main (waiting until done) to register it")
                    TKThread.performOnMainThread(waitUntilDone: true) { [self] in registerSecondary(context) }
                    record("schedule returned", 0)
                },
                cancel: { [self] _ in
                    record("cancel secondary", 0)
                    say("\(stamp) secondary source cancelled → perform on main (waiting) to unregister it")
                    TKThread.performOnMainThread(waitUntilDone: true) { [self] in
                        record("unregister secondary", 0)
                        secondaryContext = nil
                        finished = true
                        // A perform request is not a source, so the main loop's run(mode:before:)
                        // would not return for it: signal the main source (an empty buffer) so it
                        // does. (stop() could outlive this run if the pass also handled a source,
                        // and end the next scenario's run.)
                        mainContext?.source.poke()
                    }
                },
                perform: { [self] me, commands in
                    performSecondaryTask(me, commands)
                })
            let loop = TKRunLoop.current
            loop.add(source.source, forMode: .default)
            var done = false
            repeat { // the seed's CFRunLoopRunInMode(kCFRunLoopDefaultMode, 5, true) loop
                let result = loop.run(mode: .default, for: .seconds(5), returnAfterSourceHandled: true)
                if result == .stopped || result == .finished {
                    done = true
                    secondaryExit.value = result
                }
            } while !done
            say("\(stamp) secondary loop returned .\(secondaryExit.value.map { "\($0)" } ?? "?"): nothing left in it; the thread ends")
        }
        secondary.isDetached = false
        secondary.start()
        let deadline = ContinuousClock.now + interval * (rounds + 1) + .seconds(30)
        while !finished && ContinuousClock.now < deadline {
            TKRunLoop.current.run(mode: .default, before: deadline)
        }
        secondary.join()
        mainSource.source.invalidate()
        return (eventsLock.withLock { events }, secondaryExit.value)
    }

    /// Main thread, inside the secondary schedule callback's wait.
    private func registerSecondary(_ context: SourceContext) {
        record("register secondary", 0)
        secondaryContext = context
        sendCommandToSecondaryThread()
    }

    /// Main thread: the main context into the secondary buffer, then signal and wake.
    private func sendCommandToSecondaryThread() {
        guard let secondaryContext, let mainContext else { return }
        round += 1
        record("send", round)
        say("\(stamp) main → secondary: command \(round) (the main context) into its buffer; signal, wake its loop")
        secondaryContext.source.send(.work(round: round, replyTo: mainContext), to: secondaryContext.loop)
    }

    /// Secondary thread: the seed's performSecondaryThreadRunLoopSourceTask.
    private func performSecondaryTask(_ me: CommandSource, _ commands: [Command]) {
        for command in commands {
            switch command {
            case .work(let round, let replyTo):
                let alpha = generateRandomAlpha(round)
                record("secondary perform", round)
                say(
                    "\(stamp) secondary: computed \(alpha.count) alpha values on \"\(TKThread.current.name ?? "?")\"; answer into the main buffer"
                )
                replyTo.source.send(.work(round: round, replyTo: me.context!), to: replyTo.loop)
            case .stop:
                record("stop", 0)
                say("\(stamp) secondary: stop command → invalidate its source")
                me.source.invalidate()
            }
        }
    }

    /// Main thread: the seed's performMainThreadRunLoopSourceTask.
    private func performMainTask(_ commands: [Command]) {
        for case .work(let round, let replyTo) in commands {
            record("main perform", round)
            if round < rounds {
                say("\(stamp) main: reload the display (round \(round)); a one-shot \(interval) timer will send the next command")
                TKRunLoop.current.add(
                    TKTimer(interval: interval, repeats: false) { [self] _ in sendCommandToSecondaryThread() },
                    forMode: .default)
            } else {
                say("\(stamp) main: reload the display (round \(round)); that was the last: send the stop command")
                replyTo.source.send(.stop, to: replyTo.loop)
            }
        }
    }

    /// The seed's generateRandomAlpha: one value per cell, from a small generator.
    private func generateRandomAlpha(_ round: Int) -> [Double] {
        var x = 0x9E37_79B9_7F4A_7C15 &* UInt64(round + 1)
        return (0..<64).map { _ in
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            return Double(x % 1_000) / 1_000
        }
    }

    /// The demo's verdict: nil when every step happened on the right thread, in order, with the
    /// timer never early; otherwise what went wrong.
    static func failure(_ events: [Event], secondaryExit: TKRunLoop.RunResult?, rounds: Int, interval: Duration) -> String? {
        func index(_ what: String, _ round: Int = 0) -> Int? { events.firstIndex { $0.what == what && $0.round == round } }
        func event(_ what: String, _ round: Int = 0) -> Event? { index(what, round).map { events[$0] } }
        guard event("register main")?.onMain == true, event("register secondary")?.onMain == true else {
            return "a source was not registered on the main thread: \(events)"
        }
        guard let registered = index("register secondary"), let returned = index("schedule returned"),
            let firstSend = index("send", 1), registered < firstSend, firstSend < returned, !events[returned].onMain
        else {
            return "the secondary schedule callback did not wait for its registration on the main thread: \(events)"
        }
        for round in 1...rounds {
            guard let send = index("send", round), let work = index("secondary perform", round), let answer = index("main perform", round),
                send < work, work < answer, events[send].onMain, !events[work].onMain, events[answer].onMain
            else {
                return "round \(round) did not go main → secondary → main: \(events)"
            }
            if round > 1, events[send].at < event("main perform", round - 1)!.at + interval {
                return "round \(round) was sent before its \(interval) timer was due"
            }
        }
        guard let stop = index("stop"), stop > index("main perform", rounds)!, !events[stop].onMain,
            let cancel = index("cancel secondary"), cancel > stop, !events[cancel].onMain,
            let unregister = index("unregister secondary"), unregister > cancel, events[unregister].onMain
        else {
            return "the stop command did not cancel the secondary source and unregister it on the main thread: \(events)"
        }
        guard index("send", rounds + 1) == nil else { return "a command was sent after the last round" }
        guard secondaryExit == .finished else { return "the secondary loop ended with \(secondaryExit.map { "\($0)" } ?? "nothing")" }
        return nil
    }
}
