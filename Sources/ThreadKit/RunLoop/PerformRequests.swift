// PerformRequests: SPEC §3, performSelector's family in closure form. A request to a thread is a
// perform block on that thread's run loop; a waiting sender sleeps on the request's futex word.
// Thread-safe. A thread's loop is attached to its TKThread (see ThreadAttachment), so another
// thread can reach it, and is told when the thread finishes: it then fails the senders still
// waiting, and later requests throw `.threadFinished`.
//
// Lock order: the loop's lock is taken alone (requests are appended and failed under it; blocks
// run and senders are woken with it released).
import Synchronization

// safety: its only field is an atomic futex word.
/// One request whose sender waits: 0 pending, 1 done, 2 failed (the thread finished first).
final class PerformRequest: @unchecked Sendable {
    static let pending: UInt32 = 0, done: UInt32 = 1, failed: UInt32 = 2
    let state = FutexWord(PerformRequest.pending)

    /// Settles the request once; false if it was already settled. Releasing: pairs with the
    /// sender's acquiring load, so the block's effects are visible when it returns.
    func settle(_ outcome: UInt32) -> Bool {
        let settled = state.pointer.pointee.compareExchange(
            expected: PerformRequest.pending, desired: outcome,
            ordering: .acquiringAndReleasing
        ).exchanged
        if settled { Parking.unparkAll(state) }
        return settled
    }

    /// Waits until settled; true if the block ran.
    func wait() -> Bool {
        while true {
            let s = state.pointer.pointee.load(ordering: .acquiring)
            if s != PerformRequest.pending { return s == PerformRequest.done }
            _ = Parking.park(state, expected: PerformRequest.pending)
        }
    }
}

extension TKRunLoop: ThreadAttachment {
    /// The loop of `thread`, created on first use; nil if the thread is not running.
    static func loop(of thread: TKThread) -> TKRunLoop? {
        if thread === TKThread.main { return main }
        let make = { (tid: UInt32) in TKRunLoop(ownerThread: tid, owner: thread) }
        if let loop = thread.attachment(orCreate: make) { return loop }
        // Started but not yet running its first instruction: a request sent right after start()
        // is queued, as in Foundation, once the thread (and so its loop's owner) exists. Asked
        // again in any case: the thread may have begun executing since the first look.
        if thread.isStarting { thread.waitUntilStarted() }
        return thread.attachment(orCreate: make)
    }

    /// The thread finished: fail the senders still waiting and refuse later requests; the queued
    /// jobs of tasks preferring the loop (and those that are no task's) go to the global executor,
    /// and actors' jobs left queued are a misuse (TKRunLoop+Executor).
    func threadDidFinish() {
        let (waiting, movableJobs) = lock.withLock { () -> ([PerformRequest], [PendingBlock]) in
            closed = true
            defer { waitingRequests.removeAll() }
            return (Array(waitingRequests.values), takeMovableJobsLocked())
        }
        for request in waiting { _ = request.settle(PerformRequest.failed) }
        redirectJobsLeftAtThreadEnd(movableJobs)
        refuseJobsLeftAtThreadEnd()
    }
}

extension TKThread {
    /// Runs `block` on this thread's run loop, after the requests sent before it, during a pass
    /// in one of `modes`. With `waitUntilDone` the caller blocks until it has run; called on this
    /// thread itself it runs at once. Throws `.threadFinished` if the thread has finished, or
    /// finishes before running it; `.invalidArgument` if the thread has not been started or
    /// `modes` is empty (the block could never run).
    public func perform(
        waitUntilDone wait: Bool = false, modes: [TKRunLoop.Mode] = [.common],
        _ block: @escaping @Sendable () -> Void
    ) throws {
        if modes.isEmpty {
            throw TKError(
                .invalidArgument,
                "TKThread \(describe()).perform(modes: []): a request that may run in no mode "
                    + "never runs. Fix: pass the modes it may run in, e.g. [.default] or [.common].")
        }
        if wait && self === TKThread.currentIfKnown {
            block()
            return
        }
        guard let loop = TKRunLoop.loop(of: self) else {
            if isFinished {
                throw TKError(
                    .threadFinished,
                    "TKThread \(describe()).perform: the thread has finished, so nothing would run "
                        + "the block. Fix: send requests only to threads that are running (and running their run loop).")
            }
            throw TKError(
                .invalidArgument,
                "TKThread \(describe()).perform: the thread has not been started. "
                    + "Fix: start() the thread before sending it requests.")
        }
        guard wait else {
            try loop.enqueueRequest(modes, block, nil, thread: self)
            return
        }
        let request = PerformRequest()
        try loop.enqueueRequest(modes, block, request, thread: self)
        let waiting = WaitGraph.begin(self, .perform, "TKThread.perform(waitUntilDone:)") // who waits for whom (§6)
        let done = request.wait()
        WaitGraph.end(waiting)
        if !done {
            throw TKError(
                .threadFinished,
                "TKThread \(describe()).perform(waitUntilDone: true): the thread finished before "
                    + "running the request. Fix: keep the thread's run loop running until its requests are done.")
        }
    }

    /// Runs `block` on the main thread (when its run loop runs in one of `modes`). An empty
    /// `modes` is a misuse: the block could never run.
    public static func performOnMainThread(
        waitUntilDone wait: Bool = false, modes: [TKRunLoop.Mode] = [.common],
        _ block: @escaping @Sendable () -> Void
    ) {
        if modes.isEmpty { TKRunLoop.main.refuseNoModes("performOnMainThread(modes: [])") }
        // The main thread's loop lives as long as the process: this cannot throw.
        try? TKThread.main.perform(waitUntilDone: wait, modes: modes, block)
    }

    /// Runs `block` on a new detached thread (performSelectorInBackground).
    @discardableResult
    public static func performInBackground(_ block: @escaping @Sendable () -> Void) -> TKThread {
        TKThread.detachNewThread(name: "performInBackground", block)
    }
}

extension TKRunLoop {
    /// Queues a request's block; a waiting request is recorded so the thread's end can fail it.
    func enqueueRequest(
        _ modes: [Mode], _ block: @escaping @Sendable () -> Void, _ request: PerformRequest?,
        thread: TKThread
    ) throws {
        let id = request.map(ObjectIdentifier.init)
        let accepted = lock.withLock { () -> Bool in
            guard !closed else { return false }
            if let request, let id { waitingRequests[id] = request }
            return true
        }
        guard accepted else {
            throw TKError(
                .threadFinished,
                "TKThread \(thread.describe()).perform: the thread has finished. "
                    + "Fix: send requests only to running threads.")
        }
        _ = enqueueUnlessClosed(
            PendingBlock(
                modes: Self.blockModes(modes),
                block: { [weak self] in
                    guard let request, let id else { return block() }
                    guard self?.lock.withLock({ self?.waitingRequests.removeValue(forKey: id) }) != nil else { return }
                    block()
                    _ = request.settle(PerformRequest.done)
                }, isRequest: true))
    }

    // MARK: Delayed requests

    /// Runs `block` on this loop after `delay` (never earlier), in one of `modes`. With a
    /// `target` (and `key`), `cancelPreviousPerformRequests` can withdraw it before it runs. An
    /// empty `modes` is a misuse: the block could never run.
    public func perform(
        afterDelay delay: Duration, inModes modes: [Mode] = [.default],
        target: AnyObject? = nil, key: AnyHashable? = nil,
        _ block: @escaping @Sendable () -> Void
    ) {
        if modes.isEmpty { refuseNoModes("perform(afterDelay: \(delay), inModes: [])") }
        let entry = DelayedRequest(target: target, key: key)
        let timer = TKTimer(fireAt: .now + max(delay, .zero), interval: .zero, repeats: false) { [weak self] _ in
            self?.lock.withLock { self?.delayedRequests.removeAll { $0 === entry } }
            block()
        }
        entry.timer = timer
        lock.withLock { delayedRequests.append(entry) }
        for mode in modes { add(timer, forMode: mode) }
    }

    /// Withdraws the current thread's pending delayed requests made with `target`.
    public static func cancelPreviousPerformRequests(withTarget target: AnyObject) {
        current.cancelDelayed { $0.matches(target) }
    }

    /// Withdraws the current thread's pending delayed requests made with `target` and `key`.
    public static func cancelPreviousPerformRequests(withTarget target: AnyObject, key: AnyHashable) {
        current.cancelDelayed { $0.matches(target) && $0.key == key }
    }

    private func cancelDelayed(_ matches: (DelayedRequest) -> Bool) {
        let cancelled = lock.withLock { () -> [DelayedRequest] in
            let hit = delayedRequests.filter(matches)
            delayedRequests.removeAll(where: matches)
            return hit
        }
        for entry in cancelled { entry.timer?.invalidate() }
    }
}

// safety: `timer` is set once before the request is published (under the loop's lock); the
// rest is immutable or a weak reference.
/// A pending `perform(afterDelay:)`: its timer and what it can be cancelled by. The target is held
/// weakly (as an identity), so a request never keeps its target alive.
final class DelayedRequest: @unchecked Sendable {
    weak var target: AnyObject?
    let key: AnyHashable?
    var timer: TKTimer? // set once before the request is published

    init(target: AnyObject?, key: AnyHashable?) {
        self.target = target
        self.key = key
    }

    func matches(_ candidate: AnyObject) -> Bool { target === candidate }
}
