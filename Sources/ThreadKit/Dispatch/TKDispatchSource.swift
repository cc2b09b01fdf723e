// TKDispatchSource: DispatchSource (SPEC §6): timers, signals, read/write readiness, user data,
// and (extensions +Process, +FileSystemObject, +MemoryPressure) process exits, file-system object
// changes and memory pressure.
// Thread-safe. Events are merged into `state.pendingData` by the manager thread (or `add(data:)`
// callers); one delivery entry at a time runs the handlers on the target queue, so the event
// handler never runs concurrently with itself (docs/DispatchSources.md).
//
// State: `lock` (a DispatchLock) guards `state`. Lock order: source lock → manager lock (the
// manager never holds its lock while calling a source); the source lock is never held while a
// handler runs or a queue is called. `lastData` is written by the delivering thread before the
// event handler runs and read by the handler (same thread) or anyone (relaxed: a snapshot).
import CThreadKit
import Glibc
import Synchronization

// safety: `state` is touched only under `lock`; `lastData` is atomic; the rest is immutable.
/// An event source whose handler runs on a queue, like `DispatchSource`: timers, signals,
/// descriptor readiness, user data, process exits, file-system object changes and memory
/// pressure, all watched by ThreadKit's manager thread (one epoll set: timerfd, inotify, pidfd,
/// PSI triggers, and an eventfd that a signal handler writes).
///
/// A source starts inactive: set its handlers, then call ``activate()`` (or `resume()`). Events
/// that arrive before the handler runs are merged into one call (see ``data``), and the event
/// handler never runs concurrently with itself. ``cancel()`` stops it for good and runs the
/// cancel handler once. Thread-safe.
public final class TKDispatchSource: @unchecked Sendable {
    enum Kind {
        case timer
        case signal(Int32)
        case read(Int32)
        case write(Int32)
        case dataAdd
        case dataOr
        /// A process (pid); its pidfd is in `state.ownedFDs`.
        case process(Int32)
        /// A file-system object (the caller's descriptor); its inotify watch is `state.watchDescriptor`.
        case fileSystemObject(Int32)
        /// The system's memory pressure; PSI trigger descriptors in `state.ownedFDs`.
        case memoryPressure
    }

    enum Lifecycle { case inactive, active, cancelled }

    /// Where the delivery entry is: none submitted, submitted, running its handlers.
    enum Delivery { case idle, scheduled, running }

    struct State {
        var lifecycle = Lifecycle.inactive
        var suspendCount = 0
        var delivery = Delivery.idle
        /// Events merged since the last delivery.
        var hasPending = false
        var pendingData: UInt = 0
        var registrationPending = false
        var cancelHandlerDone = false
        var eventHandler: (@Sendable () -> Void)?
        var cancelHandler: (@Sendable () -> Void)?
        var registrationHandler: (@Sendable () -> Void)?
        // Timers.
        var deadline: ContinuousClock.Instant?
        var interval: Duration?
        var leeway: Duration = .zero
        /// Bumped by every schedule and by cancel: older heap entries are ignored when they fire.
        var timerGeneration: UInt64 = 0
        /// A repeating timer fired while its previous fires were still undelivered (the source or
        /// its queue suspended, or the handler behind): it is not put back in the manager's heap
        /// until a delivery takes the data, which then counts the slots missed meanwhile (as
        /// libdispatch does). So a timer nobody is handling costs the manager nothing.
        var timerParked = false
        /// Signal sources: the signal is caught for this source (released once).
        var holdsSignal = false
        /// Descriptors the source opened (a pidfd, PSI triggers); closed at cancel or deinit.
        var ownedFDs: [Int32] = []
        /// Process sources: the process was gone when the source was made (libdispatch then
        /// delivers `.exit` at once).
        var exitedBeforeWatch = false
        /// File-system object sources: the inotify watch held (-1: none) and the object's size and
        /// link count when last looked at.
        var watchDescriptor: Int32 = -1
        var fileSize: Int64 = 0
        var fileLinks: UInt64 = 0
        /// Memory-pressure sources: the level last delivered and when each trigger last fired.
        var pressure = PressureState()
    }

    let kind: Kind
    /// The events watched (process, file-system object and memory-pressure sources); 0 otherwise.
    let eventMask: UInt
    let queue: TKDispatchQueue
    let lock = DispatchLock()
    var state = State() // guarded by lock
    private let lastData = Atomic<UInt>(0)

    init(kind: Kind, queue: TKDispatchQueue, eventMask: UInt = 0) {
        self.kind = kind
        self.queue = queue
        self.eventMask = eventMask
    }

    deinit {
        if state.holdsSignal, case .signal(let signal) = kind { DispatchManager.shared.releaseSignal(signal) }
        // An active source is held by the manager until cancelled, so here it is unregistered.
        lock.withLock { releaseOwnedLocked() }
    }

    /// Closes the descriptors the source opened and gives back its inotify watch. Caller holds
    /// lock, after unregistering.
    func releaseOwnedLocked() {
        lock.assertHeld("TKDispatchSource.lock")
        for fd in state.ownedFDs { close(fd) }
        state.ownedFDs = []
        if state.watchDescriptor >= 0 {
            DispatchManager.shared.releaseFileWatch(state.watchDescriptor)
            state.watchDescriptor = -1
        }
    }

    // MARK: Making sources (all start inactive: activate() or resume())

    /// A timer source whose event handler runs on `queue`, like `DispatchSource.makeTimerSource(queue:)`.
    /// Give it a time with ``schedule(deadline:repeating:leeway:)``; it never fires early.
    public static func makeTimerSource(queue: TKDispatchQueue) -> TKDispatchSource {
        TKDispatchSource(kind: .timer, queue: queue)
    }

    /// A source for `signal`. From now until the source is cancelled (or freed) the signal is
    /// caught for the process: its default action (terminating, for most) no longer applies.
    public static func makeSignalSource(signal: Int32, queue: TKDispatchQueue) -> TKDispatchSource {
        let source = TKDispatchSource(kind: .signal(signal), queue: queue)
        if !DispatchManager.shared.catchSignal(signal) {
            misuse(
                "TKDispatchSource.makeSignalSource(signal: \(signal)): the OS refuses to catch this signal "
                    + "(SIGKILL and SIGSTOP cannot be caught; valid numbers are 1...64). Fix: watch a catchable signal.")
        }
        source.state.holdsSignal = true
        return source
    }

    /// A source for readability of `fileDescriptor`; `data` is the bytes available (FIONREAD: for a
    /// regular file, what remains from the file offset to its end). A regular file or a directory
    /// (which epoll refuses) counts as always ready, as in libdispatch: the handler runs again after
    /// each run while the source is active. A descriptor that is not open is a misuse.
    public static func makeReadSource(fileDescriptor: Int32, queue: TKDispatchQueue) -> TKDispatchSource {
        checkOpen(fileDescriptor, "makeReadSource")
        return TKDispatchSource(kind: .read(fileDescriptor), queue: queue)
    }

    /// A source for writability of `fileDescriptor` (`data` is 1). A regular file counts as always
    /// writable, as in libdispatch. A descriptor that is not open is a misuse.
    public static func makeWriteSource(fileDescriptor: Int32, queue: TKDispatchQueue) -> TKDispatchSource {
        checkOpen(fileDescriptor, "makeWriteSource")
        return TKDispatchSource(kind: .write(fileDescriptor), queue: queue)
    }

    /// Stops the process if `fd` is not an open descriptor (libdispatch returns a source that never
    /// fires, or crashes on -1, with no message).
    static func checkOpen(_ fd: Int32, _ call: String) {
        if fd < 0 || fcntl(fd, F_GETFD) == -1 {
            misuse(
                "TKDispatchSource.\(call)(fileDescriptor: \(fd)): the descriptor is not open (EBADF), so the "
                    + "source could never fire. Fix: pass a descriptor that is open, and keep it open until the "
                    + "source is cancelled (close it in the cancel handler).")
        }
    }

    /// A source fired by ``add(data:)``, like `DispatchSource.makeUserDataAddSource(queue:)`: the
    /// values added before the handler runs are summed (wrapping) into one ``data``.
    public static func makeUserDataAddSource(queue: TKDispatchQueue) -> TKDispatchSource {
        TKDispatchSource(kind: .dataAdd, queue: queue)
    }

    /// A source fired by ``add(data:)``, like `DispatchSource.makeUserDataOrSource(queue:)`: the
    /// values added before the handler runs are OR-ed into one ``data``.
    public static func makeUserDataOrSource(queue: TKDispatchQueue) -> TKDispatchSource {
        TKDispatchSource(kind: .dataOr, queue: queue)
    }

    /// How misuse messages name the source.
    var described: String {
        let h = handle
        let detail =
            switch kind {
            case .signal: " \(h)"
            case .read, .write: " fd \(h)"
            default: ""
            }
        return "TKDispatchSource (\(typeName)\(detail)) on \(queue.described)"
    }

    /// The kind of source, in libdispatch's words.
    var typeName: String {
        switch kind {
        case .timer: "timer"
        case .signal: "signal"
        case .read: "read"
        case .write: "write"
        case .dataAdd: "data add"
        case .dataOr: "data or"
        case .process: "process"
        case .fileSystemObject: "file-system object"
        case .memoryPressure: "memory pressure"
        }
    }

    /// What the source watches (dispatch_source_get_handle): the descriptor of a read, write or
    /// file-system object source, the signal number of a signal source, the process id of a
    /// process source; 0 for timers, user-data and memory-pressure sources.
    public var handle: Int32 {
        switch kind {
        case .signal(let signal): signal
        case .read(let fd), .write(let fd), .fileSystemObject(let fd): fd
        case .process(let pid): pid
        case .timer, .dataAdd, .dataOr, .memoryPressure: 0
        }
    }

    /// The events the source was made to watch (dispatch_source_get_mask): the raw value of a
    /// `ProcessEvent`, `FileSystemEvent` or `MemoryPressureEvent`; 0 for the kinds that take none.
    public var mask: UInt { eventMask }

    // MARK: Configuring

    /// Timer sources: first fire at `deadline` (never earlier), then every `interval` if given
    /// (fires missed while the handler was late are counted in `data`, not delivered in a burst).
    /// `leeway` is accepted as a permission to be late; the manager fires at the deadline.
    public func schedule(deadline: ContinuousClock.Instant, repeating interval: Duration? = nil, leeway: Duration = .zero) {
        guard case .timer = kind else {
            misuse(
                "\(described).schedule(deadline:repeating:leeway:) called on a source that is not a timer. "
                    + "Fix: create the source with TKDispatchSource.makeTimerSource(queue:).")
        }
        if let interval, interval <= .zero {
            misuse(
                "\(described).schedule(repeating: \(interval)): the interval must be positive. "
                    + "Fix: pass a positive Duration, or nil for a one-shot timer.")
        }
        lock.withLock {
            guard state.lifecycle != .cancelled else { return }
            state.deadline = deadline
            state.interval = interval
            state.leeway = leeway
            state.timerGeneration &+= 1
            state.timerParked = false
            if state.lifecycle == .active {
                DispatchManager.shared.scheduleTimer(self, generation: state.timerGeneration, at: deadline)
            }
        }
    }

    /// Sets the block that runs on the source's queue for each (coalesced) event; nil removes it.
    /// Ignored once the source is cancelled (except nil). It never runs concurrently with itself.
    public func setEventHandler(_ handler: (@Sendable () -> Void)?) {
        lock.withLock { if state.lifecycle != .cancelled || handler == nil { state.eventHandler = handler } }
    }

    /// Sets the block that runs once on the source's queue after ``cancel()``, when no event
    /// handler runs any more: the place to close a watched descriptor. Ignored once it has run.
    public func setCancelHandler(_ handler: (@Sendable () -> Void)?) {
        lock.withLock { if !state.cancelHandlerDone { state.cancelHandler = handler } }
    }

    /// Runs on the queue when the source is activated, before any event handler.
    public func setRegistrationHandler(_ handler: (@Sendable () -> Void)?) {
        lock.withLock { state.registrationHandler = handler }
    }

    // MARK: Data

    /// User-data sources: merges `data` (added, or or-ed) and schedules the handler. Adding 0 does
    /// nothing. Coalesced: many adds before the handler runs make one call with the combined value.
    public func add(data: UInt) {
        switch kind {
        case .dataAdd, .dataOr:
            if data != 0 { merge(data) }
        default:
            misuse(
                "\(described).add(data:) called on a source that is not a user-data source. "
                    + "Fix: create it with makeUserDataAddSource(queue:) or makeUserDataOrSource(queue:).")
        }
    }

    /// In the event handler: the events merged for this call: the coalesced sum (add) or union (or)
    /// of user data, the number of timer fires or signal deliveries, the bytes available to read
    /// (read sources), 1 (write sources). Elsewhere: the value of the last call.
    public var data: UInt { lastData.load(ordering: .relaxed) }

    /// Merges `value` into the pending data and schedules a delivery. Any thread.
    func merge(_ value: UInt) {
        lock.lock()
        guard state.lifecycle != .cancelled else { return lock.unlock() }
        switch kind {
        case .dataOr, .process, .fileSystemObject: state.pendingData |= value
        case .read, .write, .memoryPressure: state.pendingData = value
        case .timer, .signal, .dataAdd: state.pendingData &+= value
        }
        state.hasPending = true
        let submit = planDeliveryLocked()
        lock.unlock()
        if submit { submitDelivery() }
    }

    /// A read/write source's descriptor is ready. Read sources carry the bytes available, or 1
    /// where the descriptor cannot say (a listening socket, a directory), as libdispatch does.
    func mergeReadiness() {
        switch kind {
        case .read(let fd):
            let bytes = tk_bytesAvailable(fd)
            merge(bytes < 0 ? 1 : UInt(bytes))
        default:
            merge(1)
        }
    }

    /// The manager fired a timer entry of `generation`.
    func timerFired(generation: UInt64) {
        lock.lock()
        guard state.lifecycle != .cancelled, generation == state.timerGeneration, let deadline = state.deadline else {
            return lock.unlock()
        }
        var fires: UInt = 1
        if let interval = state.interval {
            // Every slot of the schedule that has passed counts; the next one is strictly after now.
            let now = ContinuousClock.now
            // Exact and saturating: a deadline Int.max intervals ago must not trap.
            let (passed, next) = RepeatingSchedule.advance(start: deadline, interval: interval, now: now)
            fires = UInt(max(passed, 1))
            state.deadline = next
            if state.hasPending {
                state.timerParked = true // undelivered fires wait: see `timerParked`
            } else {
                DispatchManager.shared.scheduleTimer(self, generation: generation, at: next)
            }
        } else {
            state.deadline = nil
        }
        addFiresLocked(fires)
        state.hasPending = true
        let submit = planDeliveryLocked()
        lock.unlock()
        if submit { submitDelivery() }
    }

    // MARK: Lifecycle

    /// Starts an inactive source: registers it (timer, signal, descriptor) and runs the registration
    /// handler. No effect on an active or cancelled source.
    public func activate() {
        lock.lock()
        guard state.lifecycle == .inactive else { return lock.unlock() }
        state.lifecycle = .active
        state.registrationPending = state.registrationHandler != nil
        let registered = register()
        let submit = planDeliveryLocked()
        lock.unlock()
        if submit { submitDelivery() }
        // Merged after unlocking: merging takes the source lock (issue 15 item 5: a regular file
        // used to deadlock here).
        switch registered {
        case .nothing: break
        case .readiness: mergeReadiness()
        case .merge(let value): merge(value)
        case .refused(let error): refusedByEpoll(error)
        }
    }

    /// Balances a `suspend()`; on an inactive source with no suspension, activates it. More resumes
    /// than suspends is a misuse that stops the process.
    public func resume() {
        lock.lock()
        if state.suspendCount == 0 {
            if state.lifecycle == .inactive {
                lock.unlock()
                return activate()
            }
            lock.unlock()
            misuse(
                "\(described).resume() called more times than suspend() (suspend count is 0). "
                    + "Fix: call resume() once for each earlier suspend() (a new source needs one activate() or resume()).")
        }
        state.suspendCount -= 1
        let submit = planDeliveryLocked()
        lock.unlock()
        if submit { submitDelivery() }
    }

    /// Stops delivering events (they keep being merged) until a balancing `resume()`.
    public func suspend() {
        lock.withLock { state.suspendCount += 1 }
    }

    /// Stops the source for good: no event handler starts after this (a running one finishes); the
    /// cancel handler then runs once on the queue (once the source is active and not suspended).
    public func cancel() {
        lock.lock()
        guard state.lifecycle != .cancelled else { return lock.unlock() }
        let wasActive = state.lifecycle == .active
        state.lifecycle = .cancelled
        state.timerGeneration &+= 1
        if wasActive { unregister() }
        releaseOwnedLocked()
        let holdsSignal = state.holdsSignal
        state.holdsSignal = false
        // A source cancelled before activation delivers its cancel handler now (libdispatch waits
        // for activation; ThreadKit does not let a cancelled source hang on to it).
        let submit = planDeliveryLocked()
        lock.unlock()
        if holdsSignal, case .signal(let signal) = kind { DispatchManager.shared.releaseSignal(signal) }
        if submit { submitDelivery() }
    }

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { lock.withLock { state.lifecycle == .cancelled } }

    /// What activation must do once the source's lock is released.
    enum AfterRegistering {
        case nothing
        /// An always-ready descriptor: merge its readiness.
        case readiness
        /// Merge these events now (a process that was gone before the source was made).
        case merge(UInt)
        /// epoll refused a descriptor with this errno.
        case refused(Int32)
    }

    /// Caller holds lock. The caller acts on the answer after unlocking.
    private func register() -> AfterRegistering {
        switch kind {
        case .timer:
            if let deadline = state.deadline {
                DispatchManager.shared.scheduleTimer(self, generation: state.timerGeneration, at: deadline)
            }
        case .signal(let signal): DispatchManager.shared.watchSignal(signal, source: self)
        case .read(let fd), .write(let fd):
            let write = if case .write = kind { true } else { false }
            switch DispatchManager.shared.watch(fd, write: write, source: self) {
            case .watching: return .nothing
            case .alwaysReady: return .readiness
            case .refused(let error): return .refused(error)
            }
        case .process: return registerProcessLocked()
        case .fileSystemObject: DispatchManager.shared.watchFile(state.watchDescriptor, source: self)
        case .memoryPressure: return registerMemoryPressureLocked()
        case .dataAdd, .dataOr: break
        }
        return .nothing
    }

    /// epoll refused the descriptor at activation for a reason other than "a regular file".
    private func refusedByEpoll(_ error: Int32) -> Never {
        if error == EBADF {
            misuse(
                "\(described).activate(): the descriptor was closed before the source was activated (EBADF). "
                    + "Fix: keep the descriptor open until the source is cancelled (close it in the cancel handler).")
        }
        misuse(
            "\(described).activate(): epoll refuses the descriptor (\(SystemCall.errorName(error))). "
                + "Fix: watch a pipe, socket, terminal, eventfd or regular file.")
    }

    /// Caller holds lock.
    private func unregister() {
        switch kind {
        case .timer: break // the generation moved: its heap entries are ignored
        case .signal(let signal): DispatchManager.shared.unwatchSignal(signal, source: self)
        case .read(let fd), .write(let fd): DispatchManager.shared.unwatch(fd, source: self)
        case .process:
            for fd in state.ownedFDs { DispatchManager.shared.unwatchOwned(fd) }
            DispatchManager.shared.unwatchOwnSignals(self)
        case .fileSystemObject: DispatchManager.shared.unwatchFile(state.watchDescriptor, source: self)
        case .memoryPressure: for fd in state.ownedFDs { DispatchManager.shared.unwatchOwned(fd) }
        case .dataAdd, .dataOr: break
        }
    }

    /// A descriptor the source owns is ready (manager thread, no lock held).
    func ownedDescriptorReady(_ fd: Int32, events: UInt32) {
        switch kind {
        case .process: processExited()
        case .memoryPressure: pressureTriggered(fd: fd, events: events)
        default: break
        }
    }

    // MARK: Delivery

    /// Whether a delivery entry must be submitted now; marks it scheduled. Caller holds lock.
    private func planDeliveryLocked() -> Bool {
        lock.assertHeld("TKDispatchSource.lock")
        guard state.delivery == .idle, deliveryDueLocked() else { return false }
        state.delivery = .scheduled
        return true
    }

    /// Something for a delivery to do. Caller holds lock.
    private func deliveryDueLocked() -> Bool {
        lock.assertHeld("TKDispatchSource.lock")
        guard state.suspendCount == 0 else { return false }
        switch state.lifecycle {
        case .inactive: return false
        case .active: return state.hasPending || state.registrationPending
        case .cancelled: return !state.cancelHandlerDone
        }
    }

    /// Adds timer fires to the pending data, saturating: a timer so far behind that its count
    /// overflows reports UInt.max. Caller holds lock.
    private func addFiresLocked(_ fires: UInt) {
        lock.assertHeld("TKDispatchSource.lock")
        let (sum, overflow) = state.pendingData.addingReportingOverflow(fires)
        state.pendingData = overflow ? .max : sum
    }

    /// A parked repeating timer (see `timerParked`) counts the slots that passed while it waited
    /// into the data being delivered and goes back in the manager's heap. Caller holds lock.
    private func unparkTimerLocked() {
        lock.assertHeld("TKDispatchSource.lock")
        guard state.timerParked, let deadline = state.deadline, let interval = state.interval else { return }
        state.timerParked = false
        let (passed, next) = RepeatingSchedule.advance(start: deadline, interval: interval, now: .now)
        addFiresLocked(UInt(passed))
        state.deadline = next
        DispatchManager.shared.scheduleTimer(self, generation: state.timerGeneration, at: next)
    }

    private func submitDelivery() {
        queue.async { [self] in deliver() }
    }

    /// The delivery entry, on the target queue: registration handler (once), event handler (with
    /// the merged data), cancel handler (once); then again if more was merged meanwhile.
    private func deliver() {
        lock.lock()
        state.delivery = .running
        var registration: (@Sendable () -> Void)? = nil
        if state.registrationPending && state.lifecycle == .active {
            state.registrationPending = false
            registration = state.registrationHandler
        }
        var event: (@Sendable () -> Void)? = nil
        var data: UInt = 0
        if state.lifecycle == .active && state.hasPending && state.suspendCount == 0 {
            state.hasPending = false
            unparkTimerLocked()
            data = state.pendingData
            state.pendingData = 0
            event = state.eventHandler
        }
        var cancelHandler: (@Sendable () -> Void)? = nil
        if state.lifecycle == .cancelled && !state.cancelHandlerDone && state.suspendCount == 0 {
            state.cancelHandlerDone = true
            cancelHandler = state.cancelHandler
            // Handlers often capture the source: drop them so the cycle ends here.
            state.cancelHandler = nil
            state.eventHandler = nil
            state.registrationHandler = nil
        }
        let rearm = state.lifecycle == .active && event != nil
        lock.unlock()

        registration?()
        if let event {
            lastData.store(data, ordering: .relaxed)
            event()
        }
        cancelHandler?()
        if rearm {
            switch kind {
            case .read(let fd): DispatchManager.shared.rearm(fd, write: false, source: self)
            case .write(let fd): DispatchManager.shared.rearm(fd, write: true, source: self)
            default: break
            }
        }

        lock.lock()
        state.delivery = .idle
        let again = planDeliveryLocked()
        lock.unlock()
        if again { submitDelivery() }
    }
}

private func tk_bytesAvailable(_ fd: Int32) -> Int64 { tk_bytes_available(fd) }
