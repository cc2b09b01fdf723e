// DispatchMainQueueBridge: the main run loop drains libdispatch's main queue, and with it Swift's
// main-actor jobs (docs/Concurrency.md §1: on Linux the runtime's main executor enqueues every
// main-actor job on libdispatch's main queue). The hook is the one CoreFoundation's run loop uses:
// libdispatch's main-queue eventfd in the loop's epoll set, and its drain callback.
//
// Threads: everything here runs on the main thread (the main loop's thread), except `shared`'s
// one-time initialisation. `signalled` and `drainDepth` are main-thread only, so plain fields.
import CThreadKit
import Glibc

// safety: `signalled` and `drainDepth` are touched on the main thread only; the descriptor is
// immutable after init.
final class DispatchMainQueueBridge: DescriptorWatcher, @unchecked Sendable {
    /// The bridge, nil when libdispatch is not in the process (then the main loop serves only
    /// ThreadKit's own work).
    static let shared: DispatchMainQueueBridge? = {
        let fd = tk_dispatch_main_queue_handle()
        guard fd >= 0 else { return nil }
        // The reset read below must never block, even when another drainer of the same queue
        // (Foundation's RunLoop on this thread) emptied the counter first.
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 && flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        return DispatchMainQueueBridge(fd: fd)
    }()

    /// libdispatch's eventfd; owned by libdispatch (never closed here).
    let fd: Int32
    /// libdispatch has poked the queue since the last drain. Main thread only. Starts false: work
    /// queued before the main loop first ran (a `Task { @MainActor … }` at the top of main) has
    /// already written the eventfd (libdispatch creates it on the first poke), and epoll reports a
    /// descriptor that is readable when it is added, edge-triggered or not.
    private var signalled = false
    /// Drains in progress on the main thread: a loop run from inside a main-queue block (nested)
    /// leaves the flag alone, since libdispatch's callback does nothing while its drain is on the
    /// stack (the main queue is serial) and the outer drain goes on when the block returns.
    private var drainDepth = 0

    private init(fd: Int32) { self.fd = fd }

    /// Adds the eventfd to the main loop's epoll set, edge-triggered: a report only sets the flag,
    /// so a mode that does not serve the main queue does not spin on a readable descriptor.
    func attach(to poll: EventPoll) {
        let edgeTriggered: UInt32 = 1 << 31 // EPOLLET
        _ = poll.watch(fd, events: 1 /* EPOLLIN */ | edgeTriggered, watcher: self)
    }

    func descriptorReady(_ fd: Int32, events: UInt32) { signalled = true }

    /// Whether a drain would run something now: poked since the last drain, and no drain on the
    /// stack (a nested one does nothing). Main thread; for a host loop's "work waiting?" question.
    var hasPendingWork: Bool { signalled && drainDepth == 0 }

    /// Runs one batch of libdispatch's main queue if it was poked; true if it did (a handled source,
    /// as in CFRunLoop). Main thread, in a pass of the main loop in a common mode.
    func drain() -> Bool {
        guard signalled, drainDepth == 0 else { return false }
        signalled = false
        // Reset the counter before draining: a post that lands during the drain writes it again
        // and is seen by the next pass (edge-triggered epoll reports every write).
        var counter: UInt64 = 0
        _ = read(fd, &counter, 8)
        drainDepth += 1
        _ = tk_dispatch_main_queue_drain()
        drainDepth -= 1
        return true
    }
}
