// TKRunLoop+Iteration: the run calls and the pass, phase by phase as docs/RunLoopIteration.md
// describes them. Loop thread only (checked on entry).
import Synchronization

extension TKRunLoop {
    // MARK: Run calls

    /// Runs the default mode until `stop()` or until it has nothing left (no source, timer or port).
    public func run() {
        while true {
            switch run(mode: .default, deadline: nil, returnAfterSourceHandled: false) {
            case .finished, .stopped: return
            case .timedOut, .handledSource: continue
            }
        }
    }

    /// Runs the default mode until `deadline`, `stop()`, or until it has nothing left.
    public func run(until deadline: ContinuousClock.Instant) {
        _ = run(mode: .default, deadline: deadline, returnAfterSourceHandled: false)
    }

    /// Runs `mode` once: returns after a source was handled, at `deadline`, or on `stop()`.
    /// Returns false at once when the mode has nothing that could wake it.
    @discardableResult
    public func run(mode: Mode, before deadline: ContinuousClock.Instant) -> Bool {
        run(mode: mode, deadline: deadline, returnAfterSourceHandled: true) != .finished
    }

    /// Runs `mode` for at most `duration` (negative counts as zero: one pass without sleeping).
    @discardableResult
    public func run(mode: Mode, for duration: Duration, returnAfterSourceHandled: Bool) -> RunResult {
        run(mode: mode, deadline: .now + max(duration, .zero), returnAfterSourceHandled: returnAfterSourceHandled)
    }

    // MARK: The pass

    /// One CFRunLoopRunSpecific: entry, passes until a result, exit.
    func run(mode: Mode, deadline: ContinuousClock.Instant?, returnAfterSourceHandled: Bool) -> RunResult {
        checkOwner("run")
        guard mode != .common else {
            misuse("TKRunLoop.run(mode: .common): .common is a pseudo-mode and cannot be run. Fix: run .default or a named mode.")
        }
        attachDispatchMainQueueOnce()
        if isEmpty(mode) { return .finished }
        reduceTimerSlackOnce()
        pushMode(mode)
        // The stop flag is per run, as CFRunLoop's per-run data: a stop() made for the run that
        // encloses this one (a nested run) before it began is put aside and given back at its
        // end; one made during this run and not acted on (the run returned for another reason,
        // e.g. `.handledSource`) ends with it instead of stopping the enclosing or the next run.
        // Cleared before runDepth counts this run, so a stop() that sees it running lands in it.
        let nested = runDepth.load(ordering: .relaxed) > 0 // written by this thread only
        let enclosingStop = stopRequested.exchange(false, ordering: .acquiringAndReleasing)
        runDepth.wrappingAdd(1, ordering: .acquiringAndReleasing)
        defer {
            // Given back before runDepth drops, so a stop() from another thread meanwhile, which
            // saw this run in progress, still ends the enclosing run rather than being lost.
            stopRequested.store(nested && enclosingStop, ordering: .releasing)
            runDepth.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            popMode()
            // The enclosing pass looks at its queues before it sleeps again (pollNextSleep).
            if nested { pollNextSleep = true }
        }
        notify(.entry, mode)
        var result: RunResult?
        while result == nil {
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.runLoopPass(.begin, mode) }
            // Hang watchdog (docs/Diagnostics.md §2): a pass is the work between two waits.
            var hang = DiagnosticsSwitch.isOn(.hangs) ? HangWatchdog.begin(.runLoopPass(mode: mode.rawValue)) : nil
            notify(.beforeTimers, mode)
            notify(.beforeSources, mode)
            let drainedMainQueue = runBlocks(mode)
            var handledSource = performSources(mode) || drainedMainQueue
            if handledSource { runBlocks(mode) }
            if handlePorts(mode) { handledSource = true }
            let timeUp = deadline.map { ContinuousClock.now >= $0 } ?? false
            let mustPoll = handledSource || timeUp
            if !mustPoll { notify(.beforeWaiting, mode) }
            if let pass = hang { HangWatchdog.end(pass) }
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.runLoopSleep(.begin, mode) }
            sleep(mode, deadline: deadline, poll: mustPoll)
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.runLoopSleep(.end, mode) }
            hang = DiagnosticsSwitch.isOn(.hangs) ? HangWatchdog.begin(.runLoopPass(mode: mode.rawValue)) : nil
            if !mustPoll { notify(.afterWaiting, mode) }
            // Run-loop I/O objects told of readiness signal their sources: run them now if this
            // mode holds them (docs/RunLoopIO.md), as CFRunLoop runs version-1 sources on waking.
            if serviceDescriptors() && performSources(mode) { handledSource = true }
            fireTimers(mode)
            if handlePorts(mode) { handledSource = true }
            if runBlocks(mode) { handledSource = true }
            result = outcome(
                mode, deadline: deadline, handledSource: handledSource,
                returnAfterSourceHandled: returnAfterSourceHandled)
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.runLoopPass(.end, mode) }
            if let pass = hang { HangWatchdog.end(pass) }
        }
        notify(.exit, mode)
        return result!
    }

    /// CFRunLoop's exit order: a handled source (if asked), the deadline, stop(), an empty mode.
    private func outcome(
        _ mode: Mode, deadline: ContinuousClock.Instant?, handledSource: Bool,
        returnAfterSourceHandled: Bool
    ) -> RunResult? {
        if handledSource && returnAfterSourceHandled { return .handledSource }
        if let deadline, ContinuousClock.now >= deadline { return .timedOut }
        if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
        if isEmpty(mode) { return .finished }
        return nil
    }

    /// Linux delays a thread's timer wakeups by up to 50 µs ("timer slack") to batch them. The
    /// loop coalesces its own timers through `tolerance`, so its thread asks for 1 µs of slack.
    private func reduceTimerSlackOnce() {
        guard !timerSlackReduced else { return }
        timerSlackReduced = true
        SystemCall.setTimerSlack(nanoseconds: 1_000)
    }

    func checkOwner(_ call: String) {
        let tid = SystemCall.currentThreadID
        if tid != ownerThread {
            misuse(
                "TKRunLoop.\(call) called on thread \(tid), but this run loop belongs to \(ownerDescription). "
                    + "Fix: run a loop only on its own thread: use TKRunLoop.current there, or perform(…) to send it work.")
        }
    }

    /// Nothing could ever wake the loop in `mode`: no source, timer, port, pending block, or (main
    /// loop, common mode) waiting main-queue entry.
    func isEmpty(_ mode: Mode) -> Bool {
        lock.withLock {
            (itemsLocked(mode)?.isEmpty ?? true) && !hasBlocksLocked(for: mode)
        } && !mainQueueHasWork(mode)
    }

    // MARK: Phases

    /// Calls the observers of `mode` watching `activity`, in order; non-repeating ones once.
    private func notify(_ activity: TKRunLoopActivity, _ mode: Mode) {
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.runLoopActivity(activity, mode) }
        let observers = lock.withLock { () -> [TKRunLoopObserver] in
            guard let all = itemsLocked(mode)?.observers, !all.isEmpty else { return [] }
            return all.filter { $0.activities.contains(activity) }
        }
        if observers.isEmpty { return }
        for observer in observers where observer.isValid {
            observer.handler(observer, activity)
            if !observer.repeats { observer.invalidate() }
        }
    }

    /// Runs the perform blocks queued for `mode`, in order of arrival; on the main loop in a common
    /// mode, then one batch of the main dispatch queue. True if a perform request or main-queue
    /// work ran (each a handled source, as in Cocoa).
    @discardableResult
    private func runBlocks(_ mode: Mode) -> Bool {
        let ranRequest = drainBlocks(for: mode)
        return drainMainQueue(mode) || ranRequest
    }

    /// Performs the signalled version-0 sources of `mode` in `order`. True if any ran. Visits the
    /// mode's ready list only (sources signalled since its last pass), never every source it holds.
    private func performSources(_ mode: Mode) -> Bool {
        let sources = lock.withLock { itemsLocked(mode)?.takeReady() ?? [] }
        if sources.isEmpty { return false }
        sourcesVisited.wrappingAdd(sources.count, ordering: .relaxed)
        var handled = false
        for source in sources where source.isValid && source.consumeSignal() {
            source.performCallback()
            handled = true
        }
        return handled
    }

    /// Fires the timers of `mode` that are due, earliest first, then moves repeating ones to the
    /// next slot of their schedule.
    private func fireTimers(_ mode: Mode) {
        let now = ContinuousClock.now
        let due: [TKTimer] = lock.withLock {
            guard let target = itemsLocked(mode) else { return [] }
            var due: [TKTimer] = []
            var seen: Set<ObjectIdentifier> = []
            while let top = target.timerHeap.top(where: { isLive($0, in: target) }), top.deadline <= now {
                target.timerHeap.pop()
                if seen.insert(ObjectIdentifier(top.timer)).inserted { due.append(top.timer) }
            }
            return due
        }
        for timer in due where timer.isValid {
            timer.block(timer)
            if let loop = timer.advance(after: ContinuousClock.now) { loop.reschedule(timer) }
        }
    }

    /// Sleeps until a wakeUp, a timer of `mode`, or the deadline (or only polls). The timerfd is
    /// re-armed only when the wake time moves.
    func sleep(_ mode: Mode, deadline: ContinuousClock.Instant?, poll mustPollNow: Bool) {
        // A job this thread queued during the pass, or a nested run that returned, makes this a
        // poll too (pollNextSleep).
        let mustPoll = mustPollNow || pollNextSleep
        pollNextSleep = false
        var wakeAt = deadline
        if !mustPoll, let timerWake = timerWakeTime(mode) {
            wakeAt = wakeAt.map { min($0, timerWake) } ?? timerWake
        }
        if !mustPoll && wakeAt != armedWake {
            poll.arm(after: wakeAt.map { $0 - ContinuousClock.now })
            armedWake = wakeAt
        }
        setWaiting(!mustPoll)
        // While other threads keep sending work (the last sleep ended with a wake-up), poll the
        // wake flag for a few microseconds before sleeping: the next post usually lands within
        // that window, and catching it here saves the tens of microseconds a kernel wakeup costs
        // on these machines. An idle loop, or one woken only by timers, does not spin.
        var block = !mustPoll
        if block && spinBeforeSleep {
            var spin = SpinWait(limit: SpinWait.loopLimit)
            while spin.spin() {
                if poll.wakePending.load(ordering: .relaxed) {
                    block = false
                    break
                }
            }
        }
        var wokenByPost = !block && !mustPoll
        var wokenByDescriptor = false
        // Likewise while descriptors keep becoming ready (the last sleep ended on one: a socket, or
        // Dispatch's main queue, which carries main-actor jobs): poll epoll without sleeping for a
        // few microseconds. A main-actor round trip's next job usually arrives within that window,
        // and a loop that is not asleep costs its sender no kernel wakeup.
        var caught = false
        if block && spinOnDescriptors && !CPUBudget.isSingleCPU {
            let until = ContinuousClock.now + TKRunLoop.descriptorSpin
            repeat {
                let found = takeReady(block: false)
                caught = found.post || found.descriptor || found.timer
                wokenByPost = wokenByPost || found.post
                wokenByDescriptor = found.descriptor
            } while !caught && !poll.wakePending.load(ordering: .relaxed) && ContinuousClock.now < until
        }
        if !caught {
            let found = takeReady(block: block)
            wokenByPost = wokenByPost || found.post
            wokenByDescriptor = found.descriptor
        }
        if mustPoll {
            // A poll is not a sleep: what it found adds to the verdict of the last real sleep and
            // does not reset it. A pass that handled a source (a socket event that resumed a task,
            // which wrote and now awaits the reply) keeps the descriptor spin for its next sleep.
            spinOnDescriptors = spinOnDescriptors || wokenByDescriptor
            spinBeforeSleep = spinBeforeSleep || wokenByPost
        } else {
            spinOnDescriptors = wokenByDescriptor
            spinBeforeSleep = wokenByPost
        }
        setWaiting(false)
        // Cleared after the eventfd was drained and before the queues are looked at again, so a
        // post that saw the flag set is found by this pass (see wakeUp).
        poll.wakePending.store(false, ordering: .sequentiallyConsistent)
    }

    /// One wait on the epoll set (`block`: until something is ready; else a poll), folded into the
    /// loop's state: a timer expiry disarms the timerfd's record, ready descriptors queue for
    /// `serviceDescriptors`; says whether a post (the wake eventfd), a descriptor or the timer
    /// was reported. `EventPoll.wait` has read the eventfds it reported. Loop thread.
    func takeReady(block: Bool) -> (post: Bool, descriptor: Bool, timer: Bool) {
        var found = (post: false, descriptor: false, timer: false)
        poll.wait(block: block) { token, events in
            switch token {
            case EventPoll.timerToken:
                armedWake = nil
                found.timer = true
            case EventPoll.wakeToken: found.post = true
            default:
                readyDescriptors.append((token, events))
                found.descriptor = true
            }
        }
        return found
    }

    /// Lets the owners of the descriptors that were ready (socket ports, run-loop I/O) read,
    /// accept or record readiness. Runs in every mode: reading only moves bytes into a port's
    /// queue, and I/O objects only signal their sources; delivery waits for a mode that holds
    /// them. True if any descriptor was ready.
    func serviceDescriptors() -> Bool {
        guard !readyDescriptors.isEmpty else { return false }
        for (token, events) in readyDescriptors {
            if let (watcher, fd) = poll.watcher(for: token) { watcher.descriptorReady(fd, events: events) }
        }
        readyDescriptors.removeAll(keepingCapacity: true)
        return true
    }

    /// Delivers the queued messages of the ports of `mode` to their delegates (version-1
    /// sources). True if any message was handled: the pass then does not sleep.
    private func handlePorts(_ mode: Mode) -> Bool {
        let ports = lock.withLock { () -> [TKPort] in
            guard let ports = itemsLocked(mode)?.ports, !ports.isEmpty else { return [] }
            return ports
        }
        var handled = false
        for port in ports where port.deliverQueuedMessages() { handled = true }
        return handled
    }

    /// When the loop must wake for the earliest timer of `mode`: its fire date plus its tolerance,
    /// so that timers due within that window are served by one wakeup.
    func timerWakeTime(_ mode: Mode) -> ContinuousClock.Instant? {
        lock.withLock {
            guard let target = itemsLocked(mode), let top = target.timerHeap.top(where: { isLive($0, in: target) }) else { return nil }
            return top.deadline + top.timer.state.withLock { $0.tolerance }
        }
    }
}
