// TKRunLoop+MainQueue: the hooks through which the main run loop drains the main dispatch queues
// (SPEC §6: "the main queue runs on the main thread, drained by the main run loop"): ThreadKit's
// own (`mainLoopHook`, installed once by Dispatch when the main queue is first used; the run-loop
// layer never sees Dispatch) and libdispatch's, which also holds Swift's main-actor jobs
// (`DispatchMainQueueBridge`, docs/Concurrency.md §1). Both run in every pass of the main loop in a
// common mode, ThreadKit's first. Main loop thread only, except the hook's one store.
import Synchronization

/// What the main run loop calls, in each pass in a common mode.
final class MainLoopHook: Sendable {
    /// Runs one batch of the main queue's entries; false if none was waiting. Main thread only.
    let drain: @Sendable () -> Bool
    /// Whether the main queue has entries waiting (the loop is then not empty). Any thread.
    let hasWork: @Sendable () -> Bool

    init(drain: @escaping @Sendable () -> Bool, hasWork: @escaping @Sendable () -> Bool) {
        self.drain = drain
        self.hasWork = hasWork
    }
}

extension TKRunLoop {
    /// Installed once by the main dispatch queue; loaded with acquiring order by the main loop.
    static let mainLoopHook = AtomicLazyReference<MainLoopHook>()

    /// The main queue's hook if this is the main loop running a common mode. Loop thread.
    private func mainQueueHook(_ mode: Mode) -> MainLoopHook? {
        guard self === TKRunLoop.main, let hook = TKRunLoop.mainLoopHook.load() else { return nil }
        return lock.withLock { isCommonLocked(mode) } ? hook : nil
    }

    /// Whether this is the main loop and `mode` a common mode: the passes that serve the main queues.
    private func servesMainQueues(_ mode: Mode) -> Bool {
        self === TKRunLoop.main && lock.withLock { isCommonLocked(mode) }
    }

    /// Phase "run blocks", main-queue part: one batch of ThreadKit's main queue, then one of
    /// libdispatch's (main-actor jobs, `DispatchQueue.main`). True if either ran: that counts as a
    /// handled source (SPEC §2).
    func drainMainQueue(_ mode: Mode) -> Bool {
        guard self === TKRunLoop.main else { return false }
        let ranOwn = mainQueueHook(mode)?.drain() ?? false
        guard let bridge = DispatchMainQueueBridge.shared, servesMainQueues(mode) else { return ranOwn }
        return bridge.drain() || ranOwn
    }

    /// Whether the main queues keep `mode` of this loop from being empty. As in CoreFoundation, the
    /// main loop in a common mode is never empty while libdispatch is there: it stands for
    /// libdispatch's main queue and the main actor, whose work can arrive at any time.
    func mainQueueHasWork(_ mode: Mode) -> Bool {
        guard self === TKRunLoop.main else { return false }
        if DispatchMainQueueBridge.shared != nil && servesMainQueues(mode) { return true }
        return mainQueueHook(mode)?.hasWork() ?? false
    }

    /// The first run of the main loop puts libdispatch's main-queue eventfd in its epoll set.
    /// Main thread; `bridgeAttached` is main-thread only.
    func attachDispatchMainQueueOnce() {
        guard self === TKRunLoop.main, !bridgeAttached else { return }
        bridgeAttached = true
        DispatchMainQueueBridge.shared?.attach(to: poll)
    }
}
