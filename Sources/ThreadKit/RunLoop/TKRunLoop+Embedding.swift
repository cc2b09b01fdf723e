// TKRunLoop+Embedding: what another event loop (GLib's GMainLoop, a GUI toolkit's loop) needs to
// run a TKRunLoop inside its own: one descriptor to poll, the deadline by which to run a pass, and
// a pass that never sleeps (docs/GLib.md, docs/RunLoopIteration.md "Hosted by another loop").
//
// The host's iteration, in order (GLib's prepare → poll → check → dispatch):
//   1. `nextWakeDeadline(forMode:)`: when a pass is due (now, if work waits); also arms the
//      loop's timerfd for that deadline, so the descriptor itself becomes readable then;
//   2. poll `pollDescriptor` (readable) with the host's own descriptors, until that deadline;
//   3. `runOnce(mode:)` when the descriptor is readable or the deadline has come: one pass of the
//      ordinary pass machinery (`run(mode:deadline:returnAfterSourceHandled:)`, deadline now),
//      which reads what made the descriptor readable (eventfd, timerfd, Dispatch's main-queue
//      eventfd, ready sockets), so it is not left readable: a level-triggered host never spins.
//
// What makes the descriptor readable: `pollDescriptor` is the loop's epoll set, readable while any
// descriptor in it is ready — the wake eventfd (`wakeUp()`, and so `perform` and timers added from
// other threads, TKDispatchQueue.main, port messages, signalled I/O), the timerfd (armed by step 1),
// libdispatch's main-queue eventfd on the main loop (DispatchQueue.main, @MainActor jobs), socket
// ports and TKFileDescriptorSources. Work queued on the loop's own thread between passes (a
// `perform`, a source signalled, a timer added, from a host callback) writes no wake-up, as in
// CFRunLoop: step 1 sees it and answers "now", so a host asks step 1 again before every sleep.
//
// Threads: all three calls on the loop's own thread only (checked: a misuse otherwise), like `run`.
import Synchronization

extension TKRunLoop {
    /// A descriptor a host event loop polls for readability to know when this loop has work: it
    /// becomes readable when another thread wakes the loop (`wakeUp()`, `perform`, a timer or
    /// source added, a port message, `TKDispatchQueue.main` and, on the main loop,
    /// `DispatchQueue.main` and `@MainActor` jobs), when a watched descriptor is ready, and when
    /// the deadline last returned by ``nextWakeDeadline(forMode:)`` comes. ``runOnce(mode:)``
    /// reads what made it readable. Owned by the loop: never close it, and never read it.
    /// Any thread may read the number; it stays the same for the loop's life.
    public var pollDescriptor: Int32 { poll.descriptor }

    /// When a host loop must next run a pass of `mode` (``runOnce(mode:)``): now or earlier when
    /// work is waiting (perform blocks, signalled sources, queued port messages, main-queue work
    /// seen by an earlier pass), else the wake time of the mode's earliest timer (its fire date
    /// plus its tolerance), else nil (only ``pollDescriptor`` can bring work). Also arms the loop's
    /// timer descriptor for that wake time, so ``pollDescriptor`` becomes readable then too.
    /// After a pass that was woken by a descriptor or a post, it first watches the descriptor for
    /// up to 50 µs without sleeping (once per such pass, and not where the process may use one
    /// CPU), as the loop's own sleep does, and answers now if work arrives meanwhile (what it
    /// finds is taken from the descriptor, as the loop's sleep takes it, and handed over by the
    /// next ``runOnce(mode:)``; until then this keeps answering now).
    /// Ask again before every sleep of the host: work queued on this thread since the last pass
    /// (by a host callback) makes no descriptor readable. Loop thread only: from another thread,
    /// a misuse that stops the process.
    public func nextWakeDeadline(forMode mode: Mode) -> ContinuousClock.Instant? {
        checkOwner("nextWakeDeadline(forMode:)")
        // The main loop's first question puts Dispatch's main-queue eventfd in the set, so
        // DispatchQueue.main and @MainActor work make the descriptor readable before any pass.
        attachDispatchMainQueueOnce()
        if hasWorkWaiting(mode) { return .now }
        if spinOnDescriptors || spinBeforeSleep {
            // The last pass was woken by a descriptor or a post: more usually follows within
            // microseconds (a main-actor round trip's next job). Watch the descriptor briefly, as
            // the loop's own sleep does, so the host does not pay a kernel sleep and wake-up for
            // it. Once per such pass: a host iterating for its own sources does not spin again.
            spinOnDescriptors = false
            spinBeforeSleep = false
            if !CPUBudget.isSingleCPU && descriptorTurnsReadable(within: TKRunLoop.descriptorSpin) { return .now }
        }
        let wake = timerWakeTime(mode)
        if wake != armedWake {
            poll.arm(after: wake.map { $0 - ContinuousClock.now })
            armedWake = wake
        }
        return wake
    }

    /// Runs one pass of `mode` without sleeping, for a host loop: observers (entry, beforeTimers,
    /// beforeSources, exit; not beforeWaiting/afterWaiting, as no sleep happens), perform blocks,
    /// signalled sources, port messages, ready descriptors and due timers, exactly as a pass of
    /// `run(mode:before:)` whose deadline has already come; on the main loop in a common mode also
    /// a batch of `TKDispatchQueue.main` and of libdispatch's main queue (`DispatchQueue.main`,
    /// `@MainActor` jobs). Returns `.handledSource` if a source, port message, perform request or
    /// main-queue batch ran, `.timedOut` otherwise, and `.finished` when the mode is empty (then it
    /// only reads what made ``pollDescriptor`` readable); never `.stopped`: between passes no run
    /// is in progress, so `stop()` does nothing, and one made during the pass is left for the
    /// loop's next run of its own, as CFRunLoop leaves it. Loop thread only: from another thread,
    /// a misuse that stops the process. May be called from a callback of a run in progress (a
    /// nested run).
    @discardableResult
    public func runOnce(mode: Mode) -> RunResult {
        checkOwner("runOnce(mode:)")
        // Descriptors the host's wait for work found ready (nextWakeDeadline's watch) are handed to
        // their owners before the pass, whose first batch then runs what they brought.
        _ = serviceDescriptors()
        let result = run(mode: mode, deadline: .now, returnAfterSourceHandled: true)
        if result == .finished {
            // No pass ran: still consume the wake-up, timer expiry or readiness that made the
            // descriptor readable, or a level-triggered host would see it readable forever.
            sleep(mode, deadline: nil, poll: true)
            _ = serviceDescriptors()
        }
        return result
    }

    /// Polls the loop's epoll set (and the wake flag) without sleeping for at most `window`: true
    /// as soon as either shows work. What the poll reports is taken as the loop's own sleep takes
    /// it (`takeReady`): the next `runOnce` starts by handing the ready descriptors to their owners,
    /// so a main-actor job found here runs in that pass's first batch, with no second poll before
    /// it (the host's own poll may then find `pollDescriptor` quiet: the "now" answered here is
    /// what makes it run the pass). Loop thread.
    private func descriptorTurnsReadable(within window: Duration) -> Bool {
        let until = ContinuousClock.now + window
        repeat {
            // Relaxed: only a hint to stop watching (as in `sleep`'s spin); the pass that follows
            // clears the flag with sequential consistency before it looks at the queues (wakeUp).
            if poll.wakePending.load(ordering: .relaxed) { return true }
            let found = takeReady(block: false)
            if found.post || found.descriptor || found.timer {
                // What the loop's sleep would conclude: keep watching after the coming pass.
                spinBeforeSleep = spinBeforeSleep || found.post
                spinOnDescriptors = spinOnDescriptors || found.descriptor
                return true
            }
        } while ContinuousClock.now < until
        return false
    }

    /// Work a pass of `mode` would run now that made no descriptor readable: blocks queued, sources
    /// signalled (both from this thread need no wake-up), deliverable port messages, and on the main
    /// loop Dispatch's main queue poked and not yet drained. Loop thread.
    private func hasWorkWaiting(_ mode: Mode) -> Bool {
        // Taken from the epoll set by an earlier watch and not yet handed over (the host ran no
        // pass since): the descriptor will not say so again.
        if !readyDescriptors.isEmpty { return true }
        let (local, ports) = lock.withLock { () -> (Bool, [TKPort]) in
            let items = itemsLocked(mode)
            return (hasBlocksLocked(for: mode) || (items?.hasReady ?? false), items?.ports ?? [])
        }
        if local { return true }
        // A port's messages count only when a delegate can take them (else a pass leaves them
        // queued, and "now" would make the host spin). The port's locks are taken with no loop
        // lock held (TKPort's lock order).
        if ports.contains(where: { $0.inbox.mayHaveMessages && $0.isValid && $0.delegate != nil }) { return true }
        guard self === TKRunLoop.main, let bridge = DispatchMainQueueBridge.shared, bridgeAttached else { return false }
        return bridge.hasPendingWork && lock.withLock { isCommonLocked(mode) }
    }
}
