// DispatchManager: the pool's one timer heap and event poller (docs/DispatchPool.md, "Timers,
// sources and the manager thread"): asyncAfter, timer sources, read/write readiness and caught
// signals. One manager thread sleeps in epoll_wait on an eventfd (registration changes, signals), a
// timerfd (the earliest deadline), the descriptors of read/write sources, the descriptors sources
// own (a process source's pidfd, a memory-pressure source's PSI triggers) and, once a
// file-system object source exists, one inotify instance.
//
// Threads: registration from any thread under `lock` (a leaf: the manager never holds it while
// calling a source or a queue; sources may call in while holding their own lock, so the order is
// source lock → manager lock). The thread loop's locals (the armed deadline) are its own. The
// epoll set and the two descriptors live for the process (three descriptors); the thread is started
// on first use and ends after `idleTimeout` with nothing registered.
import CThreadKit
import Glibc
import Synchronization

final class DispatchManager: @unchecked Sendable {
    static let shared = DispatchManager()
    static let idleTimeout: Duration = .seconds(2)

    private static let wakeToken: UInt64 = 0
    private static let timerToken: UInt64 = 1
    private static let inotifyToken: UInt64 = 2
    /// Tokens of owned descriptors: this bit, a generation (bits 32–62) and the descriptor.
    private static let ownedTokenFlag: UInt64 = 1 << 63
    private static let fdTokenBase: UInt64 = 16

    // epoll event bits (<sys/epoll.h>).
    static let pollIn: UInt32 = 0x001
    static let pollPri: UInt32 = 0x002
    static let pollOut: UInt32 = 0x004
    static let pollErr: UInt32 = 0x008
    static let pollHup: UInt32 = 0x010
    static let pollOneShot: UInt32 = 1 << 30

    enum TimerTarget {
        case block(@Sendable () -> Void)
        case source(TKDispatchSource, generation: UInt64)
    }

    /// The sources watching one descriptor, and which directions are armed in epoll.
    struct Watch {
        var readers: [TKDispatchSource] = []
        var writers: [TKDispatchSource] = []
        var armedRead = false
        var armedWrite = false
        /// epoll refused the descriptor (a regular file): it counts as always ready.
        var alwaysReady = false
        var registered = false
    }

    private let epoll: Int32
    private let wakeFD: Int32
    private let timerFD: Int32
    private let lock = DispatchLock()
    /// The timer heap holds slot numbers into `timerTargets`, not the targets themselves: its
    /// entries are then plain values, and sifting one of 25,000 timers moves bytes instead of
    /// copying, retaining and releasing an enum with a reference each step (that made a fire cost
    /// several times libdispatch's; issue 12).
    private var heap = DeadlineHeap<Int>() // guarded by lock
    private var timerTargets: [TimerTarget?] = [] // guarded by lock
    private var freeTimerSlots: [Int] = [] // guarded by lock
    private var watches: [Int32: Watch] = [:] // guarded by lock
    private var signalSources: [Int32: [TKDispatchSource]] = [:] // guarded by lock
    private var caughtSignals: [Int32: Int] = [:] // guarded by lock: sources per signal
    private var threadRunning = false // guarded by lock
    /// Descriptors sources own, with the generation in their token (a closed and reused number
    /// never reaches the new owner with the old one's events).
    private var owned: [Int32: (source: TKDispatchSource, generation: UInt64)] = [:] // guarded by lock
    private var ownedGeneration: UInt64 = 0 // guarded by lock
    /// The inotify instance (created on first use, lives for the process; -1 before).
    private var inotifyFD: Int32 = -1 // guarded by lock
    /// Per watch descriptor: how many sources hold it (made and not yet cancelled or freed) and
    /// which of them are active (receive its events).
    private var inotifyHolders: [Int32: Int] = [:] // guarded by lock
    private var inotifySources: [Int32: [TKDispatchSource]] = [:] // guarded by lock
    /// Process sources of this very process watching `.signal`.
    private var ownSignalSources: [TKDispatchSource] = [] // guarded by lock
    /// A wake-up write is outstanding (coalesces wakes). Cleared by the manager thread after it
    /// drains the eventfd, before it looks at its state again (sequentially consistent both sides).
    private let wakePending = Atomic<Bool>(false)
    /// A failed start of the thread was reported (once per process).
    private let reportedStartFailure = Atomic<Bool>(false)

    private init() {
        epoll = tk_epoll_create()
        wakeFD = tk_eventfd()
        timerFD = tk_timerfd()
        guard epoll >= 0, wakeFD >= 0, timerFD >= 0,
            tk_epoll_ctl(epoll, 1, wakeFD, DispatchManager.pollIn, DispatchManager.wakeToken) == 0,
            tk_epoll_ctl(epoll, 1, timerFD, DispatchManager.pollIn, DispatchManager.timerToken) == 0
        else {
            fatalError("ThreadKit: cannot create the dispatch manager's epoll/eventfd/timerfd: \(SystemCall.errorName(errno))")
        }
        tk_signal_set_wake_fd(wakeFD)
    }

    // MARK: Timers

    /// Runs `block` (which submits the real work) on the manager thread at `deadline` or later.
    func schedule(at deadline: ContinuousClock.Instant, _ block: @escaping @Sendable () -> Void) {
        push(.block(block), at: deadline)
    }

    /// Fires `source` (if its timer generation is still `generation`) at `deadline` or later.
    func scheduleTimer(_ source: TKDispatchSource, generation: UInt64, at deadline: ContinuousClock.Instant) {
        push(.source(source, generation: generation), at: deadline)
    }

    private func push(_ target: TimerTarget, at deadline: ContinuousClock.Instant) {
        lock.lock()
        let slot: Int
        if let free = freeTimerSlots.popLast() {
            slot = free
            timerTargets[slot] = target
        } else {
            slot = timerTargets.count
            timerTargets.append(target)
        }
        heap.push(slot, deadline: deadline)
        let earliest = heap.earliest == deadline
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() } else if earliest { wake() }
    }

    // MARK: Descriptors

    /// What `watch` found: epoll watches the descriptor; or epoll refuses it with EPERM (a regular
    /// file or a directory) and it counts as always ready, as libdispatch treats them; or epoll
    /// refuses it otherwise (EBADF: not open), with that errno.
    enum WatchResult: Equatable { case watching, alwaysReady, refused(Int32) }

    /// Starts watching `fd` for `source` (readability, or writability if `write`). Calls nothing on
    /// the source: the caller (which may hold the source's lock) merges readiness for `.alwaysReady`
    /// after unlocking.
    func watch(_ fd: Int32, write: Bool, source: TKDispatchSource) -> WatchResult {
        lock.lock()
        var w = watches[fd] ?? Watch()
        if !w.registered && !w.alwaysReady {
            if tk_epoll_ctl(epoll, 1, fd, interest(armedRead: !write, armedWrite: write), DispatchManager.fdTokenBase + UInt64(fd)) == 0 {
                w.registered = true
            } else if errno == EPERM {
                w.alwaysReady = true
            } else {
                let error = errno
                lock.unlock()
                return .refused(error)
            }
        }
        if write {
            w.writers.append(source)
            w.armedWrite = true
        } else {
            w.readers.append(source)
            w.armedRead = true
        }
        if w.registered {
            _ = tk_epoll_ctl(epoll, 3, fd, interest(w), DispatchManager.fdTokenBase + UInt64(fd))
        }
        let result: WatchResult = w.alwaysReady ? .alwaysReady : .watching
        watches[fd] = w
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
        return result
    }

    /// Stops watching `fd` for `source`.
    func unwatch(_ fd: Int32, source: TKDispatchSource) {
        lock.withLock {
            guard var w = watches[fd] else { return }
            w.readers.removeAll { $0 === source }
            w.writers.removeAll { $0 === source }
            if w.readers.isEmpty { w.armedRead = false }
            if w.writers.isEmpty { w.armedWrite = false }
            if w.readers.isEmpty && w.writers.isEmpty {
                if w.registered { _ = tk_epoll_ctl(epoll, 2, fd, 0, 0) }
                watches[fd] = nil
            } else {
                if w.registered { _ = tk_epoll_ctl(epoll, 3, fd, interest(w), DispatchManager.fdTokenBase + UInt64(fd)) }
                watches[fd] = w
            }
        }
    }

    /// Re-arms `fd` for `source` after its handler ran (descriptors are one-shot, so one that stays
    /// ready is reported once per handler run, not in a loop).
    func rearm(_ fd: Int32, write: Bool, source: TKDispatchSource) {
        let ready = lock.withLock { () -> Bool in
            guard var w = watches[fd] else { return false }
            let list = write ? w.writers : w.readers
            guard list.contains(where: { $0 === source }) else { return false }
            if write { w.armedWrite = true } else { w.armedRead = true }
            if w.registered { _ = tk_epoll_ctl(epoll, 3, fd, interest(w), DispatchManager.fdTokenBase + UInt64(fd)) }
            watches[fd] = w
            return w.alwaysReady
        }
        if ready { source.mergeReadiness() }
    }

    private func interest(_ w: Watch) -> UInt32 { interest(armedRead: w.armedRead, armedWrite: w.armedWrite) }

    private func interest(armedRead: Bool, armedWrite: Bool) -> UInt32 {
        (armedRead ? DispatchManager.pollIn : 0) | (armedWrite ? DispatchManager.pollOut : 0) | DispatchManager.pollOneShot
    }

    // MARK: Signals

    /// Catches `signal` for the process while at least one source for it exists (counted).
    /// Returns false if the OS refuses (SIGKILL, SIGSTOP, an invalid number).
    func catchSignal(_ signal: Int32) -> Bool {
        lock.withLock {
            if let n = caughtSignals[signal] {
                caughtSignals[signal] = n + 1
                return true
            }
            guard tk_signal_catch(signal) == 0 else { return false }
            caughtSignals[signal] = 1
            return true
        }
    }

    /// One source of `signal` is gone; the last one restores the previous action.
    func releaseSignal(_ signal: Int32) {
        lock.withLock {
            guard let n = caughtSignals[signal] else { return }
            if n > 1 {
                caughtSignals[signal] = n - 1
                return
            }
            caughtSignals[signal] = nil
            _ = tk_signal_restore(signal)
        }
    }

    /// Delivers deliveries of `signal` from now on to `source`.
    func watchSignal(_ signal: Int32, source: TKDispatchSource) {
        register {
            if signalSources[signal] == nil { _ = tk_signal_take(signal) } // earlier deliveries are not its
            signalSources[signal, default: []].append(source)
        }
    }

    /// Runs `change` under the lock, then starts the thread if it is not running.
    private func register(_ change: () -> Void) {
        lock.lock()
        change()
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
    }

    func unwatchSignal(_ signal: Int32, source: TKDispatchSource) {
        lock.withLock {
            signalSources[signal]?.removeAll { $0 === source }
            if signalSources[signal]?.isEmpty == true { signalSources[signal] = nil }
        }
    }

    // MARK: The thread

    private func startThreadLocked() -> Bool {
        lock.assertHeld("DispatchManager.lock")
        if threadRunning { return false }
        threadRunning = true
        return true
    }

    /// Starts the manager thread (the caller set `threadRunning`). When the OS refuses, timers and
    /// sources would never be served: `threadRunning` is cleared, the failure reported once, and
    /// ThreadStartRetry tries again with back-off.
    private func startThread() {
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
        return !(heap.isEmpty && watches.isEmpty && signalSources.isEmpty && owned.isEmpty
            && inotifySources.isEmpty && ownSignalSources.isEmpty)
    }

    /// Makes the manager's epoll_wait return (coalesced).
    private func wake() {
        if wakePending.load(ordering: .sequentiallyConsistent) { return }
        if !wakePending.exchange(true, ordering: .sequentiallyConsistent) {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
    }

    /// The manager loop: fire due timers, arm the timerfd for the next, sleep, deliver what is ready.
    private func run() {
        SystemCall.setTimerSlack(nanoseconds: 1_000)
        var armed: ContinuousClock.Instant? = nil
        var idleSince: ContinuousClock.Instant? = nil
        var tokens = [UInt64](repeating: 0, count: 64)
        var events = [UInt32](repeating: 0, count: 64)
        while true {
            // 1. Pop what is due (the clock is read under the lock: nothing fires early).
            lock.lock()
            let now = ContinuousClock.now
            let due = heap.popDue(now).map { entry -> TimerTarget in
                let target = timerTargets[entry.payload]!
                timerTargets[entry.payload] = nil
                freeTimerSlots.append(entry.payload)
                return target
            }
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
            // 4. Sleep until something is ready.
            let n = tokens.withUnsafeMutableBufferPointer { t in
                events.withUnsafeMutableBufferPointer { e in
                    tk_epoll_wait(epoll, t.baseAddress, e.baseAddress, 64, -1)
                }
            }
            var woken = false
            for i in 0..<Int(max(n, 0)) {
                var drained: UInt64 = 0
                switch tokens[i] {
                case DispatchManager.wakeToken:
                    _ = read(wakeFD, &drained, 8)
                    woken = true
                case DispatchManager.timerToken:
                    _ = read(timerFD, &drained, 8)
                    armed = nil
                case DispatchManager.inotifyToken:
                    fileEventsReady()
                case let token where token & DispatchManager.ownedTokenFlag != 0:
                    ownedReady(token, events[i])
                default:
                    descriptorReady(Int32(tokens[i] - DispatchManager.fdTokenBase), events[i])
                }
            }
            if woken {
                wakePending.store(false, ordering: .sequentiallyConsistent)
                deliverSignals()
            }
        }
    }

    private func fire(_ target: TimerTarget) {
        switch target {
        case .block(let block): block()
        case .source(let source, let generation): source.timerFired(generation: generation)
        }
    }

    private func arm(_ deadline: ContinuousClock.Instant?) {
        EventPoll.arm(timerFD, after: deadline.map { $0 - ContinuousClock.now })
    }

    private func descriptorReady(_ fd: Int32, _ events: UInt32) {
        let problem = events & (DispatchManager.pollErr | DispatchManager.pollHup) != 0
        let ready = lock.withLock { () -> [TKDispatchSource] in
            guard var w = watches[fd] else { return [] }
            var ready: [TKDispatchSource] = []
            if w.armedRead && (events & DispatchManager.pollIn != 0 || problem) {
                w.armedRead = false
                ready += w.readers
            }
            if w.armedWrite && (events & DispatchManager.pollOut != 0 || problem) {
                w.armedWrite = false
                ready += w.writers
            }
            // One-shot disarmed every direction: re-arm those that did not fire.
            if w.registered && (w.armedRead || w.armedWrite) {
                _ = tk_epoll_ctl(epoll, 3, fd, interest(w), DispatchManager.fdTokenBase + UInt64(fd))
            }
            watches[fd] = w
            return ready
        }
        for source in ready { source.mergeReadiness() }
    }

    private func deliverSignals() {
        let deliveries = lock.withLock { () -> [(TKDispatchSource, UInt)] in
            var list: [(TKDispatchSource, UInt)] = []
            for (signal, sources) in signalSources {
                let n = tk_signal_take(signal)
                if n > 0 { for s in sources { list.append((s, UInt(n))) } }
            }
            return list
        }
        for (source, count) in deliveries { source.merge(count) }
        if !deliveries.isEmpty {
            for source in lock.withLock({ ownSignalSources }) { source.merge(TKDispatchSource.ProcessEvent.signal.rawValue) }
        }
    }

    // MARK: Descriptors sources own (pidfd, PSI triggers)

    /// Adds `fd` (owned by `source`) to the epoll set for `events` (level-triggered unless
    /// `events` has EPOLLONESHOT). Returns 0 or the errno of epoll_ctl.
    func watchOwned(_ fd: Int32, events: UInt32, source: TKDispatchSource) -> Int32 {
        lock.lock()
        ownedGeneration = (ownedGeneration &+ 1) & 0x7FFF_FFFF
        let token = DispatchManager.ownedTokenFlag | ownedGeneration << 32 | UInt64(UInt32(bitPattern: fd))
        guard tk_epoll_ctl(epoll, 1, fd, events, token) == 0 else {
            let error = errno
            lock.unlock()
            return error
        }
        owned[fd] = (source, ownedGeneration)
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
        return 0
    }

    /// Removes `fd` from the epoll set; the source closes it after this returns.
    func unwatchOwned(_ fd: Int32) {
        lock.withLock {
            if owned.removeValue(forKey: fd) != nil { _ = tk_epoll_ctl(epoll, 2, fd, 0, 0) }
        }
    }

    private func ownedReady(_ token: UInt64, _ events: UInt32) {
        let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: token))
        let generation = (token >> 32) & 0x7FFF_FFFF
        let source = lock.withLock { () -> TKDispatchSource? in
            guard let entry = owned[fd], entry.generation == generation else { return nil }
            return entry.source
        }
        source?.ownedDescriptorReady(fd, events: events)
    }

    // MARK: Process sources of this process (.signal)

    func watchOwnSignals(_ source: TKDispatchSource) {
        register { ownSignalSources.append(source) }
    }

    func unwatchOwnSignals(_ source: TKDispatchSource) {
        lock.withLock { ownSignalSources.removeAll { $0 === source } }
    }

    // MARK: File-system objects (inotify)

    /// Adds an inotify watch on `path` (the object behind /proc/self/fd/N) held by one more
    /// source. Returns the watch descriptor, or the errno that refused it (negated).
    func holdFileWatch(path: String) -> Int32 {
        lock.withLock {
            if inotifyFD < 0 {
                let fd = tk_inotify_init()
                guard fd >= 0 else { return -errno }
                guard tk_epoll_ctl(epoll, 1, fd, DispatchManager.pollIn, DispatchManager.inotifyToken) == 0 else {
                    let error = errno
                    close(fd)
                    return -error
                }
                inotifyFD = fd
            }
            let wd = tk_inotify_watch(inotifyFD, path)
            guard wd >= 0 else { return -errno }
            inotifyHolders[wd, default: 0] += 1
            return wd
        }
    }

    /// One source no longer holds `wd`; the last one removes the inotify watch.
    func releaseFileWatch(_ wd: Int32) {
        lock.withLock {
            guard let n = inotifyHolders[wd] else { return }
            if n > 1 {
                inotifyHolders[wd] = n - 1
                return
            }
            inotifyHolders[wd] = nil
            _ = tk_inotify_unwatch(inotifyFD, wd)
        }
    }

    /// Routes the events of `wd` to `source` from now on (it is active).
    func watchFile(_ wd: Int32, source: TKDispatchSource) {
        register { inotifySources[wd, default: []].append(source) }
    }

    func unwatchFile(_ wd: Int32, source: TKDispatchSource) {
        lock.withLock {
            inotifySources[wd]?.removeAll { $0 === source }
            if inotifySources[wd]?.isEmpty == true { inotifySources[wd] = nil }
        }
    }

    /// Reads every pending inotify event and hands each watched object's events to its sources.
    private func fileEventsReady() {
        var wds = [Int32](repeating: 0, count: 256)
        var masks = [UInt32](repeating: 0, count: 256)
        while true {
            let ifd = lock.withLock { inotifyFD }
            let n = wds.withUnsafeMutableBufferPointer { w in
                masks.withUnsafeMutableBufferPointer { m in tk_inotify_read(ifd, w.baseAddress, m.baseAddress, 256) }
            }
            if n <= 0 { return }
            for i in 0..<Int(n) {
                let sources = lock.withLock { () -> [TKDispatchSource] in
                    if masks[i] & 0x8000 != 0 { inotifyHolders[wds[i]] = nil } // IN_IGNORED: the watch is gone
                    return inotifySources[wds[i]] ?? []
                }
                for source in sources { source.fileSystemObjectChanged(inotifyMask: masks[i]) }
            }
        }
    }
}
