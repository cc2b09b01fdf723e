// MainQueueDriver: connects the main dispatch queue to the main run loop (docs/DispatchPool.md:
// "The main queue ... drained by the main run loop"). `install` runs once (from the main queue's
// initializer); `wakeMainLoop` from any thread; the drain runs on the main thread only.
import Glibc

enum MainQueueDriver {
    /// The main thread's kernel id (the process id), read once: getpid() is a system call, and
    /// `sync` asks "am I the main thread?" on every call.
    static let mainThreadID = UInt32(getpid())

    static var onMainThread: Bool { SystemCall.currentThreadID == mainThreadID }

    /// Installs the run-loop hook for the main queue.
    static func install(_ queue: TKDispatchQueue) {
        _ = TKRunLoop.mainLoopHook.storeIfNil(
            MainLoopHook(
                drain: {
                    // One batch per pass: entries submitted meanwhile wait for the next pass, which
                    // the lane's rescheduling (a wakeUp) makes happen at once.
                    guard queue.lock.withLock({ queue.state.lane == .enqueued }) else { return false }
                    queue.drainLane(maxEntries: 1)
                    return true
                },
                hasWork: { queue.lock.withLock { queue.state.lane == .enqueued } }
            ))
    }

    /// The main queue has become runnable: make the main loop do a pass.
    static func wakeMainLoop() {
        TKRunLoop.main.wakeUp()
    }

    /// TKDispatch.main(): the main loop runs forever, kept non-empty by a source nobody signals.
    static func serveForever() -> Never {
        guard onMainThread else {
            misuse(
                "TKDispatch.main() called on thread \(SystemCall.currentThreadID), not the main thread: only the main "
                    + "thread serves the main queue. Fix: call TKDispatch.main() at the end of the main thread's code.")
        }
        _ = TKDispatchQueue.main
        TKRunLoop.main.add(TKRunLoopSource {}, forMode: .common)
        while true { TKRunLoop.main.run() }
    }
}
