// DispatchManager: the pool's one timer heap and event poller (docs/DispatchSources.md): asyncAfter,
// timer sources, read/write readiness, caught signals, descriptors sources own and file-system
// events. One manager thread sleeps in its EventPoll's epoll_wait on the eventfd (registration
// changes, signals), the timerfd (the earliest deadline) and the descriptors the event kinds add.
// This file owns the state of every kind (stored properties must live here), the thread (start,
// retry, idle exit) and its loop; each kind's registration and delivery is in its own file:
// +Timers, +Descriptors (read/write sources), +Signals, +OwnedDescriptors (pidfd, PSI triggers)
// and +FileEvents (inotify).
//
// Threads: registration from any thread under `lock` (a leaf: the manager never holds it while
// calling a source or a queue, and EventPoll's `add`/`change`/`remove`, called under it, take no
// lock; sources may call in while holding their own lock, so the order is source lock → manager
// lock). The loop's locals (the armed deadline, the idle start) and `poll.wait` are the manager
// thread's own. The poll lives for the process (three descriptors, plus one inotify instance once
// a file-system object source exists); the thread is started on first use and ends after
// `idleTimeout` with nothing registered.
import CThreadKit
import Glibc
import Synchronization

// safety: the registrations (timers, sources, owned descriptors, inotify holders) are read and
// written only under `lock`; the thread loop's locals are its own; the poll is set once.
final class DispatchManager: @unchecked Sendable {
    static let shared = DispatchManager()
    static let idleTimeout: Duration = .seconds(2)

    // Data words of the poll's registrations (EventPoll `add`): 0 and 1 are the poll's own wake
    // and timer tokens.
    static let inotifyToken: UInt64 = 2
    /// Tokens of owned descriptors: this bit, a generation (bits 32–62) and the descriptor.
    static let ownedTokenFlag: UInt64 = 1 << 63
    static let fdTokenBase: UInt64 = 16

    let poll = EventPoll(owner: "the dispatch manager")
    let lock = DispatchLock()

    // Timers (+Timers).
    /// The timer heap holds slot numbers into `timerTargets`, not the targets themselves: its
    /// entries are then plain values, and sifting one of 25,000 timers moves bytes instead of
    /// copying, retaining and releasing an enum with a reference each step (that made a fire cost
    /// several times libdispatch's; issue 12).
    var heap = DeadlineHeap<Int>() // guarded by lock
    var timerTargets: [TimerTarget?] = [] // guarded by lock
    var freeTimerSlots: [Int] = [] // guarded by lock

    // Read/write sources (+Descriptors).
    var watches: [Int32: Watch] = [:] // guarded by lock

    // Signals (+Signals).
    var signalSources: [Int32: [TKDispatchSource]] = [:] // guarded by lock
    var caughtSignals: [Int32: Int] = [:] // guarded by lock: sources per signal
    /// Process sources of this very process watching `.signal`.
    var ownSignalSources: [TKDispatchSource] = [] // guarded by lock

    // Descriptors sources own (+OwnedDescriptors).
    /// Descriptors sources own, with the generation in their token (a closed and reused number
    /// never reaches the new owner with the old one's events).
    var owned: [Int32: (source: TKDispatchSource, generation: UInt64)] = [:] // guarded by lock
    var ownedGeneration: UInt64 = 0 // guarded by lock

    // File-system objects (+FileEvents).
    /// The inotify instance (created on first use, lives for the process; -1 before).
    var inotifyFD: Int32 = -1 // guarded by lock
    /// Per watch descriptor: how many sources hold it (made and not yet cancelled or freed) and
    /// which of them are active (receive its events).
    var inotifyHolders: [Int32: Int] = [:] // guarded by lock
    var inotifySources: [Int32: [TKDispatchSource]] = [:] // guarded by lock

    private var threadRunning = false // guarded by lock
    /// A failed start of the thread was reported (once per process).
    private let reportedStartFailure = Atomic<Bool>(false)

    private init() {
        tk_signal_set_wake_fd(poll.wakeDescriptor)
    }

    /// Runs `change` under the lock, then starts the thread if it is not running.
    func register(_ change: () -> Void) {
        lock.lock()
        change()
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
    }

    // MARK: The thread

    /// Marks the thread running; true if the caller must start it (after unlocking). Caller holds lock.
    func startThreadLocked() -> Bool {
        lock.assertHeld("DispatchManager.lock")
        if threadRunning { return false }
        threadRunning = true
        return true
    }

    /// Starts the manager thread (the caller set `threadRunning`). When the OS refuses, timers and
    /// sources would never be served: `threadRunning` is cleared, the failure reported once, and
    /// ThreadStartRetry tries again with back-off.
    func startThread() {
        let thread = TKThread(name: "tk.dispatch.manager") { [self] in run() }
        do {
            try thread.startOrThrow()
        } catch {
            lock.withLock { threadRunning = false }
            if !reportedStartFailure.exchange(true, ordering: .relaxed) {
                SystemCall.report(
                    "ThreadKit: the dispatch manager thread (asyncAfter, timer and descriptor sources) could not "
                        + "be started (\(error)). ThreadKit retries with back-off (up to 1 s); they run once a "
                        + "thread can start. (Reported once.)")
            }
            ThreadStartRetry.shared.register(self) { [self] in retryStart() }
        }
    }

    /// ThreadStartRetry's round for the manager: start the thread if something is registered.
    private func retryStart() {
        lock.lock()
        let start = hasRegistrationsLocked && startThreadLocked()
        lock.unlock()
        if start { startThread() }
    }

    /// Anything for the thread to serve. Caller holds lock.
    private var hasRegistrationsLocked: Bool {
        lock.assertHeld("DispatchManager.lock")
        return
            !(heap.isEmpty && watches.isEmpty && signalSources.isEmpty && owned.isEmpty
            && inotifySources.isEmpty && ownSignalSources.isEmpty)
    }

    /// Drops one holder of `key` from `holders` (a count per key: sources per caught signal,
    /// per inotify watch); true when that was the last, so the caller releases what the key
    /// holds. Caller holds lock.
    static func dropHolder<Key: Hashable>(_ key: Key, from holders: inout [Key: Int]) -> Bool {
        guard let n = holders[key] else { return false }
        if n > 1 {
            holders[key] = n - 1
            return false
        }
        holders[key] = nil
        return true
    }

    /// Makes the manager's epoll_wait return (coalesced by the poll's `wakePending`: cleared by the
    /// manager thread after the poll drained the eventfd, before it looks at its state again).
    func wake() {
        poll.wakeCoalesced()
    }

    /// The manager loop: fire due timers, arm the timerfd for the next, sleep, deliver what is ready.
    private func run() {
        SystemCall.setTimerSlack(nanoseconds: 1_000)
        var armed: ContinuousClock.Instant? = nil
        var idleSince: ContinuousClock.Instant? = nil
        while true {
            // 1. Pop what is due (the clock is read under the lock: nothing fires early).
            lock.lock()
            let now = ContinuousClock.now
            let due = popDueLocked(now)
            if !hasRegistrationsLocked {
                if let since = idleSince, now - since >= DispatchManager.idleTimeout {
                    threadRunning = false
                    lock.unlock()
                    return
                }
                if idleSince == nil { idleSince = now }
            } else {
                idleSince = nil
            }
            let wakeAt = heap.earliest ?? idleSince.map { $0 + DispatchManager.idleTimeout }
            lock.unlock()
            // 2. Fire them with no lock held.
            for target in due { fire(target) }
            if !due.isEmpty { continue }
            // 3. Arm the timerfd only when the wake time moved.
            if wakeAt != armed {
                arm(wakeAt)
                armed = wakeAt
            }
            // 4. Sleep until something is ready, and deliver it.
            var woken = false
            poll.wait(block: true) { token, events in
                switch token {
                case EventPoll.wakeToken: woken = true
                case EventPoll.timerToken: armed = nil
                case DispatchManager.inotifyToken: fileEventsReady()
                case let token where token & DispatchManager.ownedTokenFlag != 0: ownedReady(token, events)
                default: descriptorReady(Int32(token - DispatchManager.fdTokenBase), events)
                }
            }
            if woken {
                poll.wakePending.store(false, ordering: .sequentiallyConsistent)
                deliverSignals()
            }
        }
    }

    private func arm(_ deadline: ContinuousClock.Instant?) {
        poll.arm(after: deadline.map { $0 - ContinuousClock.now })
    }
}
