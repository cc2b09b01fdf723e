// TKRunLoop+MainQueue: the hook through which the main run loop drains the main dispatch queue
// (SPEC §6: "the main queue runs on the main thread, drained by the main run loop"). The run-loop
// layer knows only this hook, never Dispatch: Dispatch installs it once, when the main queue is
// first used. Read by the main loop's thread each pass; written once.
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

    /// Phase "run blocks", main-queue part: one batch of the main queue. True if it ran any: that
    /// counts as a handled source (SPEC §2).
    func drainMainQueue(_ mode: Mode) -> Bool {
        mainQueueHook(mode)?.drain() ?? false
    }

    /// Whether the main queue keeps `mode` of this loop from being empty.
    func mainQueueHasWork(_ mode: Mode) -> Bool {
        mainQueueHook(mode)?.hasWork() ?? false
    }
}
