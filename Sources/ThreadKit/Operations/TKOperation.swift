// TKOperation: NSOperation (SPEC §7), on ThreadKit's dispatch layer. Thread-safe: every public
// member may be called from any thread. The design is docs/Operations.md.
//
// Who touches what:
// - `state` (OperationState's word): any thread, atomic read-modify-writes only (see the table
//   there). It carries the lifecycle (pending → executing → finished), the cancelled flag, the
//   dependency count and the once-only events (resolved, dispatched, done).
// - `lock` (a DispatchLock) guards `storedName`, `storedCompletion`, `finishedEvent`,
//   `finishWaiters` (tasks awaiting `finished()`, docs/Concurrency.md §4), `queue`,
//   `queueWhileUnfinished` and the dependency lists. `dependencyList` and `dependentList` are written only while
//   DependencyGraph.lock is held as well, so the graph's cycle search reads them under that lock
//   alone. Lock order: DependencyGraph.lock → TKOperation.lock → TKOperationQueue.lock.
// - `queue` (weak) is written once, under `lock`, before the `enqueued` bit is set (releasing);
//   threads that read it first see `enqueued` with an acquiring load. `queueWhileUnfinished` holds
//   the queue strongly from then until the operation finishes, when the finishing thread drops it
//   (under `lock`): a finished operation does not keep its queue alive.
// - `queueNext`, `queuePrev`, `epoch`, `isBarrier`: the owning queue's, under its lock.
// - `priorityRaw`, `qosRaw`: relaxed atomics; a value read when the operation is dispatched.
import Synchronization

// safety: the lifecycle is one atomic word; names, completion, waiters and the queue's links
// are touched only under `lock` (the links under the queue's lock, as documented per field).
/// One unit of work with a lifecycle: dependencies, priority, cancellation, a completion block.
/// Subclass and override `main()` (synchronous), or override `isAsynchronous` to return true and
/// `start()` (or `main()`), and call `finish()` when the work is done.
open class TKOperation: @unchecked Sendable {
    /// Where a ready operation goes among the ready operations of its queue, as
    /// `Operation.QueuePriority`: higher starts first, FIFO among equals. It orders, it does not
    /// preempt, and it never overrides dependencies.
    public enum QueuePriority: Int, Sendable {
        /// Starts after every other ready operation (raw value -8).
        case veryLow = -8
        /// Starts after normal ones (-4).
        case low = -4
        /// The default (0).
        case normal = 0
        /// Starts before normal ones (4).
        case high = 4
        /// Starts before every other ready operation (8).
        case veryHigh = 8

        /// The priority whose raw value is `rawValue` (-8, -4, 0, 4 or 8, Foundation's values),
        /// or nil. Written out for its documentation; it is what the compiler would synthesize.
        public init?(rawValue: Int) {
            switch rawValue {
            case -8: self = .veryLow
            case -4: self = .low
            case 0: self = .normal
            case 4: self = .high
            case 8: self = .veryHigh
            default: return nil
            }
        }
    }

    let state = Atomic<UInt64>(0)
    let lock = DispatchLock()
    private let priorityRaw = Atomic<Int>(QueuePriority.normal.rawValue)
    /// `TKQualityOfService.rawValue`, or `qosUnset` until someone sets it.
    private let qosRaw = Atomic<Int>(TKOperation.qosUnset)
    private static let qosUnset = Int.min
    private var storedName: String? // guarded by lock
    private var storedCompletion: (@Sendable () -> Void)? // guarded by lock
    private var finishedEvent: OperationEvent? // guarded by lock; made by the first waiter
    private var finishWaiters: AsyncWaiters<Void>? // guarded by lock; made by the first awaiting task
    /// The queue this operation was added to (never changes once set; weak, so safe to read from
    /// any thread). See the header.
    private(set) weak var queue: TKOperationQueue?
    /// The same queue, held until this operation finishes, as Foundation's operation holds its
    /// queue: a queue nobody else holds lives while it has unfinished operations, and a finished
    /// operation no longer keeps it alive. Guarded by lock.
    private var queueWhileUnfinished: TKOperationQueue?
    /// What this operation depends on (strong), and who depends on it (weak). Guarded by lock,
    /// written only under DependencyGraph.lock too.
    var dependencyList: [TKOperation] = []
    var dependentList: [DependentLink] = []
    /// The owning queue's list of unfinished operations and barrier epoch (under its lock).
    var queueNext: TKOperation?
    unowned(unsafe) var queuePrev: TKOperation?
    var epoch: UInt64 = 0
    var isBarrier = false

    /// Creates a pending operation with no dependencies, `.normal` priority and no name; add it
    /// to a `TKOperationQueue`, or call `start()` yourself once it is ready.
    public init() {}

    // MARK: Subclass points

    /// The work of a synchronous operation. The default does nothing. Never call it directly.
    open func main() {}

    /// Begins the operation on the calling thread: runs `main()` and, unless the operation is
    /// asynchronous, finishes it when `main()` returns. A cancelled operation finishes without
    /// running `main()`. Starting twice, starting an operation whose dependencies are unfinished,
    /// or starting one that was added to a queue (its queue starts it) is a misuse.
    /// Asynchronous subclasses override it and call `finish()` when done. A queue marks the
    /// operation executing before calling `start()`; started by hand, an override that calls
    /// `super.start()` first is executing from then on (`main()` runs, and it stays executing until
    /// `finish()`), one that does not reads as pending until `finish()`.
    open func start() {
        switch enterStart() {
        case .runFromQueue:
            main() // the token has recorded this operation as running on this thread
        case .runByHand:
            if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.operation(self, TKTraceEvent.operationExecuting) }
            // Recorded as running here while main() runs, so a wait for itself is reported.
            let context = OperationContext.current
            let outer = context.runningOperation
            context.runningOperation = self
            main()
            context.runningOperation = outer
        case .cancelled:
            return finishExecution(caller: "start()")
        }
        if !isAsynchronous { finishExecution(caller: "start()") }
    }

    /// Whether the operation stays executing after `start()` returns, until `finish()`.
    open var isAsynchronous: Bool { false }

    /// Ends an asynchronous operation: it becomes finished, its dependents may start, its
    /// completion block runs, its waiters return. Call it exactly once, from any thread.
    public func finish() {
        guard isAsynchronous else {
            misuse(
                "\(described).finish() called on a synchronous operation: its start() finishes it when main() "
                    + "returns. Fix: return from main(), or override isAsynchronous to return true.")
        }
        let s = state.load(ordering: .acquiring)
        if OperationState.phase(s) == OperationState.pending && s & OperationState.enqueued != 0 {
            misuse(
                "\(described).finish() called before its queue \(queue?.described ?? "") started it. "
                    + "Fix: call finish() when the work begun by start() is done.")
        }
        finishExecution(caller: "finish()")
    }

    // MARK: State

    /// Whether ``cancel()`` has been called. A running `main()` checks it to stop early.
    public var isCancelled: Bool { state.load(ordering: .acquiring) & OperationState.cancelled != 0 }
    /// Whether the operation has started and not yet finished (an asynchronous one: until ``finish()``).
    public var isExecuting: Bool { OperationState.phase(state.load(ordering: .acquiring)) == OperationState.executing }
    /// Whether the operation has finished: `main()` returned, ``finish()`` was called, or it was
    /// cancelled before it started. Once true it stays true.
    public var isFinished: Bool { OperationState.phase(state.load(ordering: .acquiring)) == OperationState.finished }
    /// True when every dependency has finished (or been cancelled), or this operation is cancelled.
    public var isReady: Bool { OperationState.isReady(state.load(ordering: .acquiring)) }

    /// Marks the operation cancelled. Not yet started: it will finish without running `main()`, and
    /// operations that depend on it no longer wait for it. Executing: `main()` should notice
    /// `isCancelled` and return early. Finished: no effect.
    public func cancel() {
        var s = state.load(ordering: .relaxed)
        var new: UInt64
        var resolveSlowly: Bool
        repeat {
            if s & OperationState.cancelled != 0 { return }
            new = s | OperationState.cancelled
            resolveSlowly = false
            if OperationState.phase(s) == OperationState.pending && s & OperationState.resolved == 0 {
                // Cancelled before start counts as finished for its dependents.
                if s & OperationState.hasDependents == 0 { new |= OperationState.resolved } else { resolveSlowly = true }
            }
            let (exchanged, original) = state.compareExchange(expected: s, desired: new, ordering: .acquiringAndReleasing)
            if exchanged { break }
            s = original
        } while true
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.operation(self, TKTraceEvent.operationCancelled) }
        if resolveSlowly { resolveDependents() }
        // A cancelled operation is ready at once: its queue starts it, and it finishes.
        if OperationState.isDispatchable(new) { tryDispatch() }
    }

    // MARK: Dependencies

    /// Makes this operation wait until `operation` has finished (or been cancelled). Throws
    /// `TKError(.dependencyCycle)` if `operation` already depends on this one, directly or through
    /// others, or is this operation itself. Adding the same dependency twice does nothing. Add
    /// dependencies before adding the operation to a queue: one added to an operation that its
    /// queue has already found ready, or that has started, does not hold it back.
    public func addDependency(_ operation: TKOperation) throws {
        try DependencyGraph.add(operation, to: self)
    }

    /// Stops waiting for `operation`. No effect if it is not a dependency.
    public func removeDependency(_ operation: TKOperation) {
        DependencyGraph.remove(operation, from: self)
    }

    /// The operations this one waits for, in the order they were added (finished ones included,
    /// as Foundation keeps them). A snapshot: other threads may add or remove dependencies.
    public var dependencies: [TKOperation] { lock.withLock { dependencyList } }

    // MARK: Properties

    /// Orders ready operations within a queue: higher first, FIFO among equals.
    public var queuePriority: QueuePriority {
        get { QueuePriority(rawValue: priorityRaw.load(ordering: .relaxed)) ?? .normal }
        set { priorityRaw.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// The QoS of the pool work that runs this operation (default: its queue's).
    public var qualityOfService: TKQualityOfService {
        get { explicitQualityOfService ?? .default }
        set { qosRaw.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// The QoS set on this operation, nil if never set (its queue's applies then).
    var explicitQualityOfService: TKQualityOfService? {
        let raw = qosRaw.load(ordering: .relaxed)
        return raw == TKOperation.qosUnset ? nil : TKQualityOfService(rawValue: raw)
    }

    /// Runs once, after the operation finished (cancelled or not), on the thread that finished it.
    /// Cleared once it has started (as Foundation does); one set after the operation finished
    /// never runs.
    public var completionBlock: (@Sendable () -> Void)? {
        get { lock.withLock { storedCompletion } }
        set {
            lock.withLock {
                storedCompletion = newValue
                // Under the lock: the finisher, seeing this bit in the value its CAS replaced,
                // takes the block under the same lock.
                if newValue != nil { state.bitwiseOr(OperationState.hasCompletion, ordering: .acquiringAndReleasing) }
            }
        }
    }

    /// A name for debugging: it appears in traces and in misuse messages. Nil by default.
    public var name: String? {
        get { lock.withLock { storedName } }
        set { lock.withLock { storedName = newValue } }
    }

    /// How misuse messages and errors name the operation.
    var described: String {
        if let name { return "\(type(of: self)) \"\(name)\"" }
        return "\(type(of: self)) \(Unmanaged.passUnretained(self).toOpaque()) (unnamed)"
    }

    // MARK: Waiting

    /// Blocks until the operation has finished and its completion block has run. A ThreadKit wait:
    /// a pool worker blocked here lets the pool start another. Waiting for itself, for an
    /// operation queued behind it on a serial queue, or on the main thread for an operation of the
    /// main queue that has not started is a deadlock, reported as a misuse.
    public func waitUntilFinished() {
        let s = state.load(ordering: .acquiring)
        if s & OperationState.done != 0 { return }
        checkWaitIsNotADeadlock(s)
        lock.lock()
        if state.bitwiseOr(OperationState.hasWaiters, ordering: .acquiringAndReleasing).oldValue & OperationState.done != 0 {
            lock.unlock()
            return
        }
        let event = finishedEvent ?? OperationEvent()
        finishedEvent = event
        lock.unlock()
        let waiting = WaitGraph.begin(self, .operation, "TKOperation.waitUntilFinished()") // who waits for whom (§6)
        event.wait()
        WaitGraph.end(waiting)
    }

    /// Suspends the calling task until the operation has finished (cancelled or not) and its
    /// completion block has run, as `waitUntilFinished()` waits. Returns at once, without
    /// suspending, if it has. Never blocks a thread. A cancelled task stops waiting at once and
    /// throws `CancellationError`. (Cancelling the task does not cancel the operation.)
    public func finished() async throws {
        if state.load(ordering: .acquiring) & OperationState.done != 0 { return }
        lock.lock()
        // The same handshake as waitUntilFinished: the finisher sees `hasWaiters` and takes the
        // list under the lock, or this sees `done`.
        if state.bitwiseOr(OperationState.hasWaiters, ordering: .acquiringAndReleasing).oldValue & OperationState.done != 0 {
            lock.unlock()
            return
        }
        let waiters = finishWaiters ?? AsyncWaiters<Void>()
        finishWaiters = waiters
        lock.unlock()
        try await waiters.wait()
    }

    /// Tasks waiting in `finished()` now (tests).
    var asyncWaiterCount: Int { lock.withLock { finishWaiters }?.count ?? 0 }

    private func checkWaitIsNotADeadlock(_ s: UInt64) {
        let context = OperationContext.existing
        if let running = context?.runningOperation, running === self {
            misuse(
                "\(described).waitUntilFinished() called from its own main(): it would wait for itself forever. "
                    + "Fix: return from main() instead; wait from another thread or use a completionBlock.")
        }
        guard OperationState.phase(s) == OperationState.pending, s & OperationState.enqueued != 0, let queue else { return }
        if queue.isMain && TKThread.isMainThread && context?.runningOperation == nil {
            misuse(
                "\(described).waitUntilFinished() called on the main thread for an operation of TKOperationQueue.main that "
                    + "has not started: the main queue runs on this very thread, so it would wait forever. "
                    + "Fix: use a completionBlock, or wait on another thread.")
        }
        if let context, context.runningOperation != nil, context.queue === queue, queue.isSerial {
            misuse(
                "\(described).waitUntilFinished() called from an operation of the serial queue \(queue.described) that "
                    + "must run it: the queue runs one operation at a time, so it would wait forever. "
                    + "Fix: make it a dependency instead, or raise maxConcurrentOperationCount.")
        }
    }

    // MARK: The lifecycle, inside ThreadKit

    private enum StartEntry { case runFromQueue, runByHand, cancelled }

    /// `start()`'s entry: pending → executing (a start by hand), or executing as set by the queue.
    /// `.cancelled`: finish it without running `main()`.
    private func enterStart() -> StartEntry {
        var s = state.load(ordering: .acquiring)
        while true {
            if s & OperationState.startEntered != 0 {
                misuse("\(described).start() called twice. Fix: start an operation once, or add it to a queue and let the queue start it.")
            }
            var new = s | OperationState.startEntered
            switch OperationState.phase(s) {
            case OperationState.pending:
                if s & OperationState.enqueued != 0 {
                    misuse(
                        "\(described).start() called by hand on an operation added to \(queue?.described ?? "a queue"): "
                            + "its queue starts it. Fix: do not call start(); wait with waitUntilFinished() instead.")
                }
                if !OperationState.isReady(s) {
                    misuse(
                        "\(described).start() called while \(OperationState.count(s)) of its dependencies are unfinished. "
                            + "Fix: start it when isReady is true, or add it and its dependencies to a TKOperationQueue.")
                }
                new = (new & ~OperationState.phaseMask) | OperationState.executing
            case OperationState.executing:
                break // the queue moved it to executing just before calling start()
            default:
                misuse("\(described).start() called on a finished operation. Fix: create a new operation for new work.")
            }
            let (exchanged, original) = state.compareExchange(expected: s, desired: new, ordering: .acquiringAndReleasing)
            if exchanged {
                if s & OperationState.cancelled != 0 { return .cancelled }
                return OperationState.phase(s) == OperationState.pending ? .runByHand : .runFromQueue
            }
            s = original
        }
    }

    /// The queue's way in: pending → executing then `start()`; or, cancelled, pending → finished
    /// without calling `start()` at all (so an asynchronous subclass never begins cancelled work).
    final func runFromQueue() {
        var s = state.load(ordering: .acquiring)
        while s & OperationState.cancelled == 0 {
            let new = (s & ~OperationState.phaseMask) | OperationState.executing
            let (exchanged, original) = state.compareExchange(expected: s, desired: new, ordering: .acquiringAndReleasing)
            if exchanged {
                if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.operation(self, TKTraceEvent.operationExecuting) }
                // Hang watchdog (docs/Diagnostics.md §2): the operation's start() is one activity;
                // its waiters name this thread (§6).
                guard DiagnosticsSwitch.isOn(WaitGraph.recording) else { return start() }
                let running = WaitGraph.beginRunning(self, exclusive: true)
                let hang = DiagnosticsSwitch.isOn(.hangs) ? HangWatchdog.begin(.operation(described)) : nil
                defer {
                    if let hang { HangWatchdog.end(hang) }
                    if running { WaitGraph.endRunning(self) }
                }
                return start()
            }
            s = original
        }
        finishExecution(caller: "cancel()")
    }

    /// → finished; then, in order: dependents told, the completion block, waiters released, the
    /// queue told (directly, or through the token running this operation on this thread).
    final func finishExecution(caller: String) {
        var s = state.load(ordering: .acquiring)
        var new: UInt64
        repeat {
            if OperationState.phase(s) == OperationState.finished {
                misuse("\(described).\(caller) called on an operation that has already finished. Fix: call finish() exactly once.")
            }
            new = (s & ~OperationState.phaseMask) | OperationState.finished
            // Nobody depends on it (the bit is set under the lock by addDependency, an RMW ordered
            // with this CAS): resolved here, without the lock.
            if s & OperationState.hasDependents == 0 { new |= OperationState.resolved }
            let (exchanged, original) = state.compareExchange(expected: s, desired: new, ordering: .acquiringAndReleasing)
            if exchanged { break }
            s = original
        } while true
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.operation(self, TKTraceEvent.operationFinished) }
        // Finished inside start() on the token that runs it: the token does the queue's bookkeeping
        // and then pops again, so dependents this readies on the same queue need no new token.
        var inline: OperationContext?
        if s & OperationState.enqueued != 0, let context = OperationContext.existing, context.runningOperation === self {
            context.finishedInline = true
            inline = context
        }
        if new & OperationState.resolved == 0 { resolveDependents() }
        if s & OperationState.hasCompletion != 0 {
            let completion = lock.withLock { () -> (@Sendable () -> Void)? in
                defer { storedCompletion = nil }
                return storedCompletion
            }
            completion?()
        }
        if state.bitwiseOr(OperationState.done, ordering: .acquiringAndReleasing).oldValue & OperationState.hasWaiters != 0 {
            let (event, waiters) = lock.withLock { (finishedEvent, finishWaiters) }
            event?.set()
            waiters?.close(returning: ())
        }
        guard s & OperationState.enqueued != 0 else { return }
        // Let go of the queue (a token running this operation inline holds it meanwhile).
        let owner = lock.withLock { () -> TKOperationQueue? in
            defer { queueWhileUnfinished = nil }
            return queueWhileUnfinished
        }
        if inline == nil, let owner { owner.operationDidFinish(self) }
    }

    /// Tells the dependents that this operation no longer holds them back (once). Takes the lock:
    /// an addDependency racing with this either counted itself before (and is in the snapshot) or
    /// sees `resolved` and does not count.
    final func resolveDependents() {
        lock.lock()
        let s = state.bitwiseOr(OperationState.resolved, ordering: .acquiringAndReleasing).oldValue
        let links = s & OperationState.resolved == 0 ? dependentList : []
        lock.unlock()
        for link in links where link.counted {
            link.operation?.dependencyResolved()
        }
    }

    /// One counted dependency was resolved (or removed).
    final func dependencyResolved() {
        let new = state.wrappingSubtract(OperationState.countUnit, ordering: .acquiringAndReleasing).newValue
        if OperationState.count(new) == 0 && OperationState.isDispatchable(new) { tryDispatch() }
    }

    /// Hands the operation to its queue's ready list if it is enqueued, pending, ready and not
    /// handed over yet. Exactly one caller wins the `dispatched` bit.
    final func tryDispatch() {
        var s = state.load(ordering: .acquiring)
        while OperationState.isDispatchable(s) {
            let (exchanged, original) = state.compareExchange(
                expected: s, desired: s | OperationState.dispatched,
                ordering: .acquiringAndReleasing)
            if exchanged {
                if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.operation(self, TKTraceEvent.operationReady) }
                queue!.pushReady(self)
                return
            }
            s = original
        }
    }

    /// Why `claim` refused an operation.
    enum ClaimRefusal {
        case alreadyAdded(TKOperationQueue)
        case started
        case finished
    }

    /// Claims the operation for `queue` (under the operation's lock) and runs `register` (the
    /// queue's locked registration, which returns false if it found the operation started by hand
    /// meanwhile) before anyone can see it enqueued. Returns why it refused, for the caller's
    /// misuse message (made after the locks are released: naming the operation takes its lock).
    final func claim(for queue: TKOperationQueue, register: () -> Bool) -> ClaimRefusal? {
        lock.lock()
        defer { lock.unlock() }
        if let owner = self.queue { return .alreadyAdded(owner) }
        switch OperationState.phase(state.load(ordering: .acquiring)) {
        case OperationState.pending: break
        case OperationState.executing: return .started
        default: return .finished
        }
        self.queue = queue
        queueWhileUnfinished = queue
        if register() { return nil }
        queueWhileUnfinished = nil
        return .started
    }
}

/// The reverse edge of a dependency: who waits for an operation, and whether that waiter counted
/// it (it did not if the operation was already resolved, or the waiter had started).
struct DependentLink {
    weak var operation: TKOperation?
    let counted: Bool
}
