// TKRunLoop: one run loop per thread, CFRunLoop's semantics on epoll (docs/RunLoopIteration.md).
//
// Threads: `run…` only on the loop's own thread (checked: a misuse otherwise). add/remove,
// perform, stop and wakeUp from any thread.
// State:
//   - `lock` guards `modes`, `commonModes`, `commonItems`, `blocks` and `currentModeStack`.
//     Callbacks (sources, observers, timers, blocks) always run with it released.
//   - `poll` (epoll/eventfd/timerfd) is used by the loop thread, except `wake()` (any thread).
//   - `armedWake`, `runDepth` are loop-thread only; `stopRequested`, `waiting` (and `poll.wakePending`) are
//     atomics written from other threads.
// Lock order: loop lock, then an item's own lock (timer state, memberships are never taken while
// holding the loop lock except timer state). Items' membership locks are taken with no loop lock.
import Glibc
import Synchronization

// safety: the modes, blocks and requests are touched only under `lock` (or by the owner
// thread, where a field says so); the rest is immutable or thread-safe (`poll`).
/// A thread's event loop (NSRunLoop, CFRunLoop): it sleeps until a signalled source, a port
/// message, a due timer or a performed block needs it, runs that work on its thread, and tells
/// observers about each stage of a pass.
///
/// Each thread has one, made on first use of `current`; the initial thread's is `main`. Work is
/// grouped in modes (`Mode`): a run serves only what its mode holds, and `.common` stands for every
/// mode of the loop's common-mode set. `add`, `remove`, `perform`, `stop()` and `wakeUp()` may be
/// called from any thread; the `run` calls only on the loop's own thread; running it from another
/// thread, or running `.common`, stops the process with a message. Callbacks (sources, observers,
/// timers, ports, blocks) run on the loop's thread with no loop lock held, so they may add, remove,
/// perform, or run the loop again (a nested run).
public final class TKRunLoop: @unchecked Sendable {
    /// The kernel id of the thread that owns and runs this loop.
    let ownerThread: UInt32
    /// That thread's object, given when the loop is made (weak: the thread holds its loop), so
    /// misuse messages can name it as it is named when they are written (`ownerDescription`).
    /// Set in init only.
    private weak var owner: TKThread?

    let lock = RawMutex()
    private var modes: [Mode: ModeItems] = [:] // guarded by lock
    /// The main loop starts with the seeds' three common modes, a secondary loop with `.default`
    /// only (CFRunLoop on Apple's platforms).
    private var commonModes: Set<Mode> // guarded by lock
    /// What was added to `.common`, so it joins modes added to the common set later.
    private let commonItems = ModeItems() // guarded by lock
    /// A queued perform block and the modes it may run in (`nil`: the common modes, the usual case,
    /// kept apart so draining needs no string comparisons).
    struct PendingBlock {
        let modes: [Mode]?
        let block: @Sendable () -> Void
        /// A perform request (performSelector:onThread: and kin), which Cocoa delivers through a
        /// version-0 source: running it counts as a handled source, so `run(mode:before:)`
        /// returns after it. A plain `perform` block (CFRunLoopPerformBlock) does not.
        var isRequest = false
        /// A Swift concurrency job that may run elsewhere (of a task preferring the loop as its task
        /// executor, or no task's: TKRunLoop+Executor.swift `submit`): taken out and sent to the
        /// global executor if the loop's thread ends with it queued.
        var isMovableJob = false
    }

    /// Pending perform blocks in order of arrival. Guarded by lock.
    private var blocks: [PendingBlock] = []
    /// The loop thread's spare drain buffer, swapped with `blocks` under the lock so neither array
    /// is reallocated per drain. Loop thread only (outside the swap).
    private var draining: [PendingBlock] = []
    /// Whether a drain in progress holds `draining` (a nested run then drains into its own array).
    /// Loop thread only.
    private var drainingLent = false
    private var currentModeStack: [Mode] = [] // guarded by lock; written by the loop thread
    /// Senders waiting for their perform requests (SPEC §3), failed if the thread finishes.
    var waitingRequests: [ObjectIdentifier: PerformRequest] = [:] // guarded by lock
    /// Set when the loop's thread has finished: requests are refused from then on.
    var closed = false // guarded by lock
    /// Pending `perform(afterDelay:)` requests, for cancelPreviousPerformRequests.
    var delayedRequests: [DelayedRequest] = [] // guarded by lock

    let poll = EventPoll()
    /// The loop's metrics counters, made when `.metrics` first sees a block for it (Metrics.swift).
    let metrics = MetricsSlot()
    /// The deadline the timerfd is armed for (nil: disarmed). Loop thread only.
    var armedWake: ContinuousClock.Instant?
    /// Whether the last sleep was ended by a cross-thread wake-up, so the next one spins briefly
    /// first (see `sleep`). Loop thread only.
    var spinBeforeSleep = false
    /// Whether the last sleep ended on a ready descriptor, so the next one polls epoll briefly
    /// first (see `sleep`). Loop thread only.
    var spinOnDescriptors = false
    /// The next sleep only polls, so the pass after it looks at the queues first. Set when
    /// - a Swift concurrency job was queued by the loop's own thread while it runs (a task resumed
    ///   by a source's callout, a job queuing the next: TKRunLoop+Executor `submit`);
    /// - a nested run returned: its sleeps may have drained wake-ups meant for the enclosing run's
    ///   mode (a block another thread posted while the nested run's wake-up was outstanding writes
    ///   nothing), and the enclosing pass may already be past its block phase. Without this the
    ///   enclosing run slept to its deadline with that block queued (docs/Reliability.md).
    /// A flag, not a wake-up write: the loop does not wake itself, and the poll leaves the spin
    /// state of the last real sleep as it was (a task resumed by a socket keeps the descriptor spin
    /// that catches the socket's next event). Loop thread only.
    var pollNextSleep = false
    /// How long a loop polls epoll without sleeping after a descriptor woke it.
    static let descriptorSpin: Duration = .microseconds(50)
    /// How many version-0 sources passes have visited (taken off ready lists), for the tests that
    /// check a pass costs what is ready, not what exists. Relaxed: a statistic.
    let sourcesVisited = Atomic<Int>(0)
    /// Descriptors epoll reported ready in the last sleep, serviced after it. Loop thread only.
    var readyDescriptors: [(UInt64, UInt32)] = []
    /// Whether this loop's thread has had its timer slack reduced. Loop thread only.
    var timerSlackReduced = false
    /// Swift concurrency jobs queued and run on this loop (TKRunLoop+Executor).
    let jobBook = RunLoopJobBook()
    /// Main loop: whether libdispatch's main-queue eventfd is in `poll` (TKRunLoop+MainQueue).
    /// Loop thread only.
    var bridgeAttached = false
    /// Nesting depth of `run` calls in progress. Written by the loop thread; read by `stop()`.
    let runDepth = Atomic<Int>(0)
    /// Set by `stop()`, consumed by the innermost run. Per run: a nested run puts the enclosing
    /// run's flag aside for its duration and gives it back at its end, and a flag its own run did
    /// not act on ends with that run (TKRunLoop+Iteration `run(mode:deadline:returnAfterSourceHandled:)`).
    let stopRequested = Atomic<Bool>(false)
    private let waiting = Atomic<Bool>(false)

    init(ownerThread: UInt32, owner: TKThread?) {
        self.ownerThread = ownerThread
        self.owner = owner
        commonModes = ownerThread == TKRunLoop.mainThreadID ? [.default, .modalPanel, .eventTracking] : [.default]
        if ownerThread == TKRunLoop.mainThreadID { BlockingChecker.mainLoopMade(self) }
    }

    // MARK: Getting loops

    /// The calling thread's loop, created on first use and released with the thread.
    public static var current: TKRunLoop {
        if let loop = currentSlot.value { return loop }
        let tid = SystemCall.currentThreadID
        // The same object perform requests from other threads reach through the thread.
        let thread = TKThread.current
        let loop = tid == mainThreadID ? main : TKRunLoop.loop(of: thread) ?? TKRunLoop(ownerThread: tid, owner: thread)
        currentSlot.value = loop
        return loop
    }

    /// The loop of the process's initial thread.
    public static var main: TKRunLoop { mainLoop }

    /// The calling thread's loop if it has been made (never makes one): a loop that runs was made.
    static var currentIfMade: TKRunLoop? {
        if let loop = currentSlot.value { return loop }
        return SystemCall.currentThreadID == mainThreadID ? main : nil
    }

    static let mainThreadID = UInt32(getpid())
    private static let mainLoop = TKRunLoop(ownerThread: mainThreadID, owner: TKThread.main)

    /// The owning thread for messages: `thread TID`, then `(the main thread)` or the thread's
    /// name as it is now, e.g. `thread 4711 ("decoder")`.
    var ownerDescription: String {
        if ownerThread == TKRunLoop.mainThreadID { return "thread \(ownerThread) (the main thread)" }
        guard let name = owner?.name else { return "thread \(ownerThread)" }
        return "thread \(ownerThread) (\"\(name)\")"
    }
    private static let currentSlot = TKThreadLocal<TKRunLoop>()

    /// The loop's name in metrics (docs/Metrics.md): `main`, or its thread's name (nil: unnamed).
    var metricsName: String? { ownerThread == TKRunLoop.mainThreadID ? "main" : owner?.name }

    /// The mode of the innermost run in progress, nil when the loop is not running.
    public var currentMode: Mode? { lock.withLock { currentModeStack.last } }

    /// True while the loop sleeps waiting for something to happen.
    public var isWaiting: Bool { waiting.load(ordering: .acquiring) }

    func setWaiting(_ value: Bool) { waiting.store(value, ordering: .releasing) }

    // MARK: Modes

    /// Adds `mode` to the common-mode set: everything added to `.common` joins it now and later.
    public func addCommonMode(_ mode: Mode) {
        guard mode != .common else { return }
        var scheduled: [TKRunLoopSource] = []
        lock.withLock {
            guard commonModes.insert(mode).inserted else { return }
            let target = items(mode)
            for source in commonItems.sourcesInOrder where target.insertSource(source) { scheduled.append(source) }
            for observer in commonItems.observers { _ = ModeItems.insertSorted(observer, into: &target.observers, order: { $0.order }) }
            for port in commonItems.ports where !target.ports.contains(where: { $0 === port }) { target.ports.append(port) }
        }
        for source in scheduled { joined(source, mode) }
        for timer in lock.withLock({ commonTimers }) { addTimer(timer, [mode]) }
    }

    /// Timers added to `.common` (kept so they join later common modes). Guarded by lock.
    private var commonTimers: [TKTimer] = []

    /// The modes an operation on `mode` touches: `.common` expands to the common set.
    private func expand(_ mode: Mode) -> [Mode] {
        mode == .common ? Array(commonModes) : [mode]
    }

    /// The items of `mode`, created on first use. Caller holds lock.
    private func items(_ mode: Mode) -> ModeItems {
        if let existing = modes[mode] { return existing }
        let created = ModeItems()
        modes[mode] = created
        return created
    }

    /// Whether `mode` is in the common set. Caller holds lock.
    func isCommonLocked(_ mode: Mode) -> Bool {
        lock.assertHeld("TKRunLoop.lock")
        return commonModes.contains(mode)
    }

    /// The items of `mode` if any. Caller holds lock.
    func itemsLocked(_ mode: Mode) -> ModeItems? {
        lock.assertHeld("TKRunLoop.lock")
        return modes[mode]
    }

    // MARK: Sources

    /// Adds a version-0 source to `mode` (`.common`: every common mode, including ones added
    /// later), like CFRunLoopAddSource. The loop holds the source until it is removed or
    /// invalidated, and calls its `schedule` callback for each mode it joins, on the calling
    /// thread. A source signalled before it was added is performed in the next pass. An
    /// invalidated source, or a mode the source is in already, is left alone. Thread-safe: from
    /// another thread it also wakes the loop.
    public func add(_ source: TKRunLoopSource, forMode mode: Mode) {
        guard source.isValid else { return }
        let added: [Mode] = lock.withLock {
            if mode == .common { _ = commonItems.insertSource(source) }
            return expand(mode).filter { items($0).insertSource(source) }
        }
        for m in added { joined(source, m) }
        if SystemCall.currentThreadID != ownerThread { wakeUp() }
    }

    /// Removes a version-0 source from `mode` (`.common`: from every common mode), like
    /// CFRunLoopRemoveSource, and calls its `cancel` callback for each mode it left, on the
    /// calling thread. The source stays valid, and signalled if it was: added again, it performs.
    /// A mode it is not in is left alone. Thread-safe; does not wake the loop.
    public func remove(_ source: TKRunLoopSource, forMode mode: Mode) {
        let removed: [Mode] = lock.withLock {
            if mode == .common { _ = commonItems.removeSource(source) }
            return expand(mode).filter { items($0).removeSource(source) }
        }
        for m in removed {
            source.memberships.withLock { $0.removeAll { $0.loop === self && $0.mode == m } }
            source.cancelCallback?(self, m)
        }
    }

    private func joined(_ source: TKRunLoopSource, _ mode: Mode) {
        source.memberships.withLock { $0.append(RunLoopMembership(loop: self, mode: mode)) }
        // A source signalled before it joined `mode` goes on the mode's ready list now. Looked at
        // after the membership is published: a `signal()` either saw the membership (and put it
        // there itself) or set the flag before reading the memberships, so this load sees it.
        if source.isSignaled { markReady(source, in: [mode]) }
        source.scheduleCallback?(self, mode)
    }

    /// Puts a signalled `source` on the ready lists of `modes` (those it is still in). Any thread;
    /// called by `TKRunLoopSource.signal()` with no lock held.
    func markReady(_ source: TKRunLoopSource, in modes: [Mode]) {
        lock.withLock {
            for m in modes { self.modes[m]?.markReady(source) }
        }
    }

    /// Called by `invalidate()`: drops the source from `mode` and calls its cancel callback.
    func detach(_ source: TKRunLoopSource, from mode: Mode) {
        let removed = lock.withLock { () -> Bool in
            _ = commonItems.removeSource(source)
            return items(mode).removeSource(source)
        }
        if removed { source.cancelCallback?(self, mode) }
    }

    // MARK: Observers

    /// Adds `observer` to `mode`. An observer watches one loop at a time (it may be in several of
    /// its modes), as CFRunLoopObserver: adding it to a second loop while it is still in a mode of
    /// the first is a misuse.
    public func add(_ observer: TKRunLoopObserver, forMode mode: Mode) {
        guard observer.isValid else { return }
        let targetModes = lock.withLock { expand(mode) }
        // Claimed before the loop sees it, under the observer's own lock (no loop lock held), so
        // two threads adding one observer to two loops cannot both succeed.
        let other = observer.memberships.withLock { list -> TKRunLoop? in
            if let other = list.lazy.compactMap(\.loop).first(where: { $0 !== self }) { return other }
            for m in targetModes where !list.contains(where: { $0.loop === self && $0.mode == m }) {
                list.append(RunLoopMembership(loop: self, mode: m))
            }
            return nil
        }
        if let other {
            misuse(
                "TKRunLoopObserver added to the run loop of \(ownerDescription) while it observes the loop of "
                    + "\(other.ownerDescription): an observer watches one run loop. Fix: remove it from the first loop (or "
                    + "invalidate it), or create a separate TKRunLoopObserver per loop.")
        }
        lock.withLock {
            if mode == .common { _ = ModeItems.insertSorted(observer, into: &commonItems.observers, order: { $0.order }) }
            for m in targetModes { _ = ModeItems.insertSorted(observer, into: &items(m).observers, order: { $0.order }) }
        }
    }

    /// Removes `observer` from `mode`; once it is in no mode of this loop it may join another loop.
    public func remove(_ observer: TKRunLoopObserver, forMode mode: Mode) {
        let removed: [Mode] = lock.withLock {
            if mode == .common { _ = ModeItems.remove(observer, from: &commonItems.observers) }
            let targetModes = expand(mode)
            for m in targetModes { _ = ModeItems.remove(observer, from: &items(m).observers) }
            return targetModes
        }
        observer.memberships.withLock { list in
            list.removeAll { $0.loop === self && removed.contains($0.mode) }
        }
    }

    func detach(_ observer: TKRunLoopObserver, from mode: Mode) {
        lock.withLock {
            _ = ModeItems.remove(observer, from: &commonItems.observers)
            _ = ModeItems.remove(observer, from: &items(mode).observers)
        }
    }

    // MARK: Timers

    /// Adds `timer` to `mode`. A timer belongs to one loop (it may be in several of its modes);
    /// adding it to a second loop is a misuse.
    public func add(_ timer: TKTimer, forMode mode: Mode) {
        if mode == .common {
            lock.withLock { if !commonTimers.contains(where: { $0 === timer }) { commonTimers.append(timer) } }
        }
        // An invalidated timer is refused; one remembered for common modes just above leaves again
        // (its `invalidate()` already ran, so nothing else would drop it).
        if !addTimer(timer, lock.withLock { expand(mode) }), mode == .common {
            lock.withLock { commonTimers.removeAll { $0 === timer } }
        }
    }

    /// Schedules `timer` in `targetModes`; false (and nothing done) if it was invalidated.
    @discardableResult
    private func addTimer(_ timer: TKTimer, _ targetModes: [Mode]) -> Bool {
        let accepted = timer.state.withLock { s -> Bool in
            guard s.valid else { return false }
            if let other = s.loop, other !== self {
                misuse(
                    "TKTimer added to the run loop of \(ownerDescription) while it is scheduled on the loop of "
                        + "\(other.ownerDescription): a timer belongs to one run loop. Fix: create a separate TKTimer per loop.")
            }
            s.loop = self
            s.modes.formUnion(targetModes)
            return true
        }
        guard accepted else { return false }
        lock.withLock {
            let (fireDate, generation) = timer.state.withLock { ($0.fireDate, $0.generation) }
            for m in targetModes {
                let target = items(m)
                if target.timers.insert(ObjectIdentifier(timer)).inserted {
                    target.timerHeap.push(timer, deadline: fireDate, generation: generation)
                }
            }
        }
        if SystemCall.currentThreadID != ownerThread { wakeUp() }
        return true
    }

    /// Called after a timer's fire date changed: queue its new deadline in each of its modes.
    func reschedule(_ timer: TKTimer) {
        lock.withLock {
            let (fireDate, generation, timerModes) = timer.state.withLock { ($0.fireDate, $0.generation, $0.modes) }
            for m in timerModes where items(m).timers.contains(ObjectIdentifier(timer)) {
                items(m).timerHeap.push(timer, deadline: fireDate, generation: generation)
            }
        }
        if SystemCall.currentThreadID != ownerThread { wakeUp() }
    }

    /// Called by the timer's `invalidate()`: drops it from `mode`, heap entries included, so the
    /// loop no longer holds it (an invalidated timer is freed once its users let go).
    func detach(_ timer: TKTimer, from mode: Mode) {
        lock.withLock {
            commonTimers.removeAll { $0 === timer }
            let target = items(mode)
            _ = target.timers.remove(ObjectIdentifier(timer))
            target.timerHeap.removeAll { $0.timer === timer }
        }
    }

    /// The earliest fire date of the valid timers in `mode`, nil if it has none.
    public func nextTimerFireDate(forMode mode: Mode) -> ContinuousClock.Instant? {
        lock.withLock {
            let m = mode == .common ? Mode.default : mode
            guard let target = modes[m] else { return nil }
            return target.timerHeap.top(where: { isLive($0, in: target) })?.deadline
        }
    }

    /// Whether a heap entry still stands for its timer in this mode. Caller holds lock.
    func isLive(_ entry: TimerHeap.Entry, in target: ModeItems) -> Bool {
        guard target.timers.contains(ObjectIdentifier(entry.timer)) else { return false }
        return entry.timer.state.withLock { $0.valid && $0.generation == entry.generation }
    }

    // MARK: Ports

    /// Adds `port` to `mode`: a version-1 source. A message arriving on it wakes this loop by
    /// itself, and its delegate runs on this loop's thread. An invalid port is not added.
    public func add(_ port: TKPort, forMode mode: Mode) {
        guard port.isValid else { return }
        let added: [Mode] = lock.withLock {
            if mode == .common && !commonItems.ports.contains(where: { $0 === port }) { commonItems.ports.append(port) }
            return expand(mode).filter { m in
                guard !items(m).ports.contains(where: { $0 === port }) else { return false }
                items(m).ports.append(port)
                return true
            }
        }
        for m in added { port.joined(self, m) }
        // Messages may already be queued: let the pass look at the port.
        if !added.isEmpty && SystemCall.currentThreadID != ownerThread { wakeUp() }
    }

    /// Removes `port` from `mode` (`.common`: from every common mode), like NSRunLoop's
    /// `remove(_:forMode:)` for a port: runs of `mode` no longer deliver its messages. Messages
    /// nothing delivers stay queued in the port until a loop holding it runs one of its modes.
    /// The port stays valid; a mode it is not in is left alone. Thread-safe.
    public func remove(_ port: TKPort, forMode mode: Mode) {
        let removed: [Mode] = lock.withLock {
            if mode == .common { _ = ModeItems.remove(port, from: &commonItems.ports) }
            return expand(mode).filter { ModeItems.remove(port, from: &items($0).ports) }
        }
        for m in removed { port.left(self, m) }
    }

    /// Called by the port's `invalidate()`: drops it from `mode`.
    func detach(_ port: TKPort, from mode: Mode) {
        lock.withLock {
            _ = ModeItems.remove(port, from: &commonItems.ports)
            _ = ModeItems.remove(port, from: &items(mode).ports)
        }
    }

    // MARK: Perform blocks, stop, wake

    /// Runs `block` on the loop's thread during a pass in one of `modes` (`.common`: any common
    /// mode), after the blocks queued before it. From another thread this also wakes the loop.
    /// An empty `modes` is a misuse: no pass could ever run the block.
    public func perform(inModes modes: [Mode] = [.common], _ block: @escaping @Sendable () -> Void) {
        if modes.isEmpty { refuseNoModes("perform(inModes: [])") }
        enqueue(PendingBlock(modes: Self.blockModes(modes), block: block))
    }

    /// `perform(inModes: [.common], block)` without building the modes array: the common case,
    /// and the one a trailing-closure call `loop.perform { … }` resolves to.
    public func perform(_ block: @escaping @Sendable () -> Void) {
        enqueue(PendingBlock(modes: nil, block: block))
    }

    /// Stops the process for a request with no modes: it could never run.
    func refuseNoModes(_ call: String) -> Never {
        let loop = ownerThread == TKRunLoop.mainThreadID ? "TKRunLoop.main" : "the TKRunLoop of thread \(ownerThread)"
        misuse(
            "\(call) on \(loop): a block that may run in no mode never runs. Fix: pass the modes it may run in, "
                + "e.g. [.default] or [.common].")
    }

    /// A block's modes as stored: nil for "the common modes", the usual case.
    static func blockModes(_ modes: [Mode]) -> [Mode]? {
        modes.count == 1 && modes[0] == .common ? nil : modes
    }

    /// A block for a loop whose thread has finished is dropped: nothing would ever run it.
    private func enqueue(_ entry: PendingBlock) {
        _ = enqueueUnlessClosed(entry)
    }

    /// Queues `entry` unless the loop's thread has finished (false: nothing will run it); wakes the loop from another thread
    /// unless `wake` is false (the caller then wakes it: TKRunLoop+Executor `submit`, which may not
    /// touch the loop once the entry is queued).
    func enqueueUnlessClosed(_ entry: PendingBlock, wake: Bool = true) -> Bool {
        var entry = entry
        if DiagnosticsSwitch.isOn(.metrics) { // counted, one in N timed (docs/Metrics.md)
            entry = PendingBlock(
                modes: entry.modes, block: Metrics.loopBlock(entry.block, loop: self), isRequest: entry.isRequest,
                isMovableJob: entry.isMovableJob)
        }
        let accepted = lock.withLock { () -> Bool in
            guard !closed else { return false }
            blocks.append(entry)
            return true
        }
        if wake && accepted && SystemCall.currentThreadID != ownerThread { wakeUp() }
        return accepted
    }

    /// Takes the queued movable jobs (`PendingBlock.isMovableJob`) out of the queue (the loop's
    /// thread has finished: `threadDidFinish`). Lock held.
    func takeMovableJobsLocked() -> [PendingBlock] {
        lock.assertHeld("TKRunLoop.lock")
        guard blocks.contains(where: \.isMovableJob) else { return [] }
        let jobs = blocks.filter(\.isMovableJob)
        blocks.removeAll(where: \.isMovableJob)
        return jobs
    }

    /// Runs the queued blocks that may run in `mode`, in order of arrival, with the lock released;
    /// the others stay queued, ahead of blocks posted meanwhile. Loop thread only. Re-entrant: a
    /// block may run the loop again (a nested run drains into a batch of its own; the spare buffer
    /// `draining` is lent to the outermost drain only).
    /// True if a perform request (a source, for `run(mode:before:)`) ran.
    @discardableResult
    func drainBlocks(for mode: Mode) -> Bool {
        var batch: [PendingBlock] = []
        let lent = drainingLent
        if !lent { swap(&batch, &draining) } // reuse the spare buffer's capacity
        let common = lock.withLock { () -> Bool in
            swap(&blocks, &batch)
            return commonModes.contains(mode)
        }
        defer {
            if !lent {
                batch.removeAll(keepingCapacity: true)
                swap(&batch, &draining)
                drainingLent = false
            }
        }
        guard !batch.isEmpty else { return false }
        drainingLent = true
        var deferred: [PendingBlock] = []
        var ranRequest = false
        for entry in batch {
            guard Self.accepts(entry, mode, common) else {
                deferred.append(entry)
                continue
            }
            // Blocks skipped so far go back first, so a block that runs the loop in their mode
            // (a nested run) finds them.
            if !deferred.isEmpty { requeueFront(&deferred) }
            if DiagnosticsSwitch.isOn(.metrics) { Metrics.loopBlockStarting(self) }
            entry.block()
            ranRequest = ranRequest || entry.isRequest
        }
        if !deferred.isEmpty { requeueFront(&deferred) }
        return ranRequest
    }

    /// Puts skipped blocks back ahead of those posted meanwhile, and empties `skipped`.
    private func requeueFront(_ skipped: inout [PendingBlock]) {
        lock.withLock { blocks.insert(contentsOf: skipped, at: 0) }
        skipped.removeAll(keepingCapacity: true)
    }

    private static func accepts(_ entry: PendingBlock, _ mode: Mode, _ modeIsCommon: Bool) -> Bool {
        guard let modes = entry.modes else { return modeIsCommon }
        return modes.contains(mode) || (modeIsCommon && modes.contains(.common))
    }

    /// Whether blocks wait for `mode`. Caller holds lock.
    func hasBlocksLocked(for mode: Mode) -> Bool {
        lock.assertHeld("TKRunLoop.lock")
        let common = commonModes.contains(mode)
        return blocks.contains { Self.accepts($0, mode, common) }
    }

    /// Ends the innermost run in progress (with no run in progress: no effect). Any thread. A run
    /// that returns for another reason first (a handled source, its deadline) drops the request:
    /// it never ends the run that enclosed it or the next one (CFRunLoopStop's rule).
    public func stop() {
        guard runDepth.load(ordering: .acquiring) > 0 else { return }
        stopRequested.store(true, ordering: .releasing)
        wakeUp()
    }

    /// Wakes the loop if it sleeps (or makes its next sleep return at once). Coalesced: while a
    /// wake-up is outstanding, further calls write nothing. Sequentially consistent exchange:
    /// pairs with the loop's clear of `poll.wakePending` before it looks at its queues again.
    public func wakeUp() { poll.wakeCoalesced() }

    func pushMode(_ mode: Mode) { lock.withLock { currentModeStack.append(mode) } }
    func popMode() { lock.withLock { _ = currentModeStack.popLast() } }
}
