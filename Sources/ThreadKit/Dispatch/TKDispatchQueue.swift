// TKDispatchQueue: DispatchQueue (SPEC §6). Thread-safe: every member may be called from any
// thread. A queue is a lane of entries (docs/DispatchPool.md): global queues are the pool's run
// queues themselves; custom queues hold their entries in `pending` and submit themselves (serial)
// or tokens (concurrent) to their target; the main queue is drained by the main run loop.
//
// State: `lock` (a DispatchLock, a leaf) guards `state`, `pending`, `ready` and `specifics`.
// `batch` belongs to the thread draining the lane while `state.lane == .draining` (at other times
// it is touched only under `lock`, by TKDispatchQueue+Storage). `suspended`
// mirrors `state.suspendCount` for the drainer's check between entries (relaxed: a stale read only
// lets one more entry start, which libdispatch allows too). `kind`, `label`, `qos` are immutable
// after init. `target` is written only while the queue is inactive (`setTarget(queue:)`, under
// `lock`); once the queue is active it never changes, so the paths that read it without the lock
// (submitting a lane or tokens, sync's chain walk, getSpecific) read a value published by the
// activation's unlock. `context` and `finalizer` are guarded by `lock` (read once more in deinit).
import Synchronization

// safety: the queue's state, rings and values are touched only under `lock`; `batch` only by
// the thread draining the queue (one at a time, handed over under `lock`); the rest is
// immutable or atomic.
/// A FIFO queue of work that ThreadKit's own thread pool runs: `DispatchQueue` without libdispatch.
///
/// A serial queue runs one item at a time, in submission order; a concurrent queue starts items
/// in order and runs them together, except that a `.barrier` item waits for everything before it
/// and runs alone. Custom queues run on the shared pool through their target (by default the
/// global queue of their QoS); ``main`` runs on the main thread, drained by the main run loop or
/// by ``TKDispatch/main()``. Thread-safe: every member may be called from any thread.
///
/// `sync` onto the queue the caller is already running on (directly or through its targets) is
/// detected and stops the process with a message, where libdispatch would hang.
public final class TKDispatchQueue: @unchecked Sendable {
    /// How a queue made with ``init(label:qos:attributes:target:)`` behaves, as `DispatchQueue.Attributes`.
    public struct Attributes: OptionSet, Sendable {
        /// The bits of the set: `concurrent` is 1, `initiallyInactive` is 2.
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// A concurrent queue: items start in order and run together (barriers alone). Without it
        /// the queue is serial.
        public static let concurrent = Attributes(rawValue: 1 << 0)
        /// The queue starts inactive: submitted work waits until ``TKDispatchQueue/activate()``
        /// (or a first `resume()`), and ``TKDispatchQueue/setTarget(queue:)`` may still be called.
        public static let initiallyInactive = Attributes(rawValue: 1 << 1)
    }

    /// Options for one submitted item, as `DispatchWorkItemFlags` (only `barrier` exists here).
    public struct WorkFlags: OptionSet, Sendable {
        /// The bits of the set: `barrier` is 1.
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// On a concurrent queue, the item waits until every earlier item has finished, and
        /// nothing submitted later starts until it has finished. Serial queues run every item
        /// alone already.
        public static let barrier = WorkFlags(rawValue: 1 << 0)
    }

    enum Kind: Equatable {
        /// A global queue: its entries go straight to the pool's run queue of `level`.
        case root(level: Int)
        case serial
        case concurrent
        /// The main queue: a serial lane drained by the main run loop.
        case main
    }

    /// Where a serial lane is (serial and main queues).
    enum Lane {
        /// Nobody drains it and it is not scheduled.
        case idle
        /// Scheduled on its target (or the main loop), not yet draining.
        case enqueued
        /// A thread runs a batch of it.
        case draining
        /// A `sync` caller runs its block inline on its own thread.
        case ownedBySync
    }

    enum Lifecycle { case inactive, active }

    struct State {
        var lifecycle: Lifecycle
        var suspendCount = 0
        /// Serial and main queues.
        var lane = Lane.idle
        /// Concurrent queues: non-barrier entries started (moved to `ready`) and not finished.
        var inFlight = 0
        /// Concurrent queues: a barrier is ready or running; nothing else starts meanwhile.
        var barrierRunning = false
        /// A later look at the queue's rings is scheduled (TKDispatchQueue+Storage).
        var ringLookScheduled = false
    }

    /// The name given at creation; it appears in ``debugDescription``, traces and misuse messages.
    public let label: String
    let kind: Kind
    let qos: TKQualityOfService
    /// The queue this one runs on; nil for global queues and the main queue. Changed only while
    /// inactive (see the header).
    var target: TKDispatchQueue?
    let lock = DispatchLock()
    /// The queue as a lock to the lock-order checker (docs/Diagnostics.md §1): `sync` waits for it.
    let orderLabel: LockName
    var state: State // guarded by lock
    /// Entries not yet started: a serial lane's queue, a concurrent queue's waiting entries.
    var pending = JobRing<DispatchEntry>() // guarded by lock
    /// The drainer's batch, swapped with `pending` (serial lanes).
    var batch = JobRing<DispatchEntry>() // owned by the draining thread
    /// Concurrent queues: entries started, one per token submitted to the target, in order.
    let ready = JobRing<DispatchEntry>() // guarded by lock
    let suspended = Atomic<Int>(0)
    private var specifics: [UInt64: any Sendable] = [:] // guarded by lock
    var contextValue: (any Sendable)? // guarded by lock
    var finalizer: (@Sendable (any Sendable) -> Void)? // guarded by lock

    // MARK: Creating

    /// Creates a custom queue, like `DispatchQueue(label:qos:attributes:target:)`.
    ///
    /// - Parameters:
    ///   - label: The queue's name in debug output, traces and misuse messages.
    ///   - qos: The quality of service of its work; also picks the default target.
    ///   - attributes: `.concurrent` for a concurrent queue (else serial); `.initiallyInactive`
    ///     to hold work until ``activate()``.
    ///   - target: The queue this one runs on; nil means the global queue of `qos`.
    public init(
        label: String, qos: TKQualityOfService = .default, attributes: Attributes = [],
        target: TKDispatchQueue? = nil
    ) {
        self.label = label
        orderLabel = LockName(label)
        self.qos = qos
        kind = attributes.contains(.concurrent) ? .concurrent : .serial
        self.target = target ?? TKDispatchQueue.global(qos: qos)
        state = State(lifecycle: attributes.contains(.initiallyInactive) ? .inactive : .active)
    }

    private init(label: String, kind: Kind, qos: TKQualityOfService) {
        self.label = label
        orderLabel = LockName(label)
        self.kind = kind
        self.qos = qos
        target = nil
        state = State(lifecycle: .active)
    }

    deinit {
        // libdispatch's _dispatch_dispose: the finalizer runs asynchronously on the target queue,
        // with the context, only if both are set.
        if let finalizer, let contextValue, let target {
            target.async { finalizer(contextValue) }
        }
    }

    /// The global queue of `qos`: one shared pool, run queues per QoS.
    public static func global(qos: TKQualityOfService = .default) -> TKDispatchQueue {
        roots[RunQueues.level(qos)]
    }

    static func root(_ level: Int) -> TKDispatchQueue { roots[level] }

    /// The global queues as unretained references, by level, for the worker's per-job path
    /// (reading `roots` retained and released a queue twice per job). They live for the process.
    nonisolated(unsafe) static let rootReferences: UnsafePointer<Unmanaged<TKDispatchQueue>> = {
        let references = UnsafeMutablePointer<Unmanaged<TKDispatchQueue>>.allocate(capacity: roots.count)
        for (level, queue) in roots.enumerated() { (references + level).initialize(to: .passUnretained(queue)) }
        return UnsafePointer(references)
    }()

    private static let roots: [TKDispatchQueue] = [
        TKQualityOfService.background, .utility, .default, .userInitiated, .userInteractive,
    ].map { qos in
        TKDispatchQueue(label: "tk.global.\(qos)-qos", kind: .root(level: RunQueues.level(qos)), qos: qos)
    }

    /// The main thread's queue, drained by the main run loop (and `TKDispatch.main()`).
    public static let main: TKDispatchQueue = {
        let queue = TKDispatchQueue(label: "tk.main-thread", kind: .main, qos: .userInteractive)
        MainQueueDriver.install(queue)
        return queue
    }()

    var isRoot: Bool { if case .root = kind { true } else { false } }
    var isSerialLane: Bool { kind == .serial || kind == .main }

    /// How misuse messages name the queue.
    var described: String { "TKDispatchQueue \"\(label)\"" }

    // MARK: Submitting

    /// Submits `work` to run on the queue and returns at once, like `DispatchQueue.async(group:flags:execute:)`.
    ///
    /// With a `group`, the group is entered now and left when `work` returns. With `.barrier`
    /// on a concurrent queue, `work` runs alone after every earlier item. Work submitted to a
    /// suspended or inactive queue waits until it is resumed or activated.
    public func async(group: TKDispatchGroup? = nil, flags: WorkFlags = [], execute work: @escaping @Sendable () -> Void) {
        group?.enter()
        // One load of the switch for every hook. Contention counters (docs/Diagnostics.md §3): the
        // block carries its enqueue time; metrics (docs/Metrics.md): the item is counted, one in N
        // is timed; the trace: the item is recorded if its thread samples it (flight mode).
        let features = DiagnosticsSwitch.current
        let observed = !features.isDisjoint(with: TKDiagnosticsFeature.contention.union(.metrics))
        let block = observed ? Metrics.observedBlock(work, queue: self) : work
        var entry = DispatchEntry(.block(block), group: group, barrier: flags.contains(.barrier))
        if TraceRecorder.tracesItem(features) { entry.traceFlow = TraceRecorder.dispatchEnqueued(self) }
        enqueue(consume entry)
    }

    /// Submits `workItem` and returns at once, like `DispatchQueue.async(execute:)` with a
    /// `DispatchWorkItem`. The item's flags apply (`.barrier`); an item cancelled before the
    /// queue reaches it is skipped, yet still counts as finished for its waiters and notifications.
    public func async(execute workItem: TKDispatchWorkItem) {
        var entry = DispatchEntry(.item(workItem), barrier: workItem.flags.contains(.barrier))
        if TraceRecorder.tracesItem(DiagnosticsSwitch.current) { entry.traceFlow = TraceRecorder.dispatchEnqueued(self) }
        enqueue(entry)
    }

    /// Submits `work` at `deadline` or later, never earlier.
    public func asyncAfter(deadline: ContinuousClock.Instant, execute work: @escaping @Sendable () -> Void) {
        DispatchManager.shared.schedule(at: deadline) { [self] in async(execute: work) }
    }

    // MARK: Suspending and activating

    /// Stops the queue from starting entries (after those already started) until a balancing
    /// `resume()`. No effect on global queues.
    public func suspend() {
        guard !isRoot else { return }
        lock.withLock {
            state.suspendCount += 1
            suspended.store(state.suspendCount, ordering: .relaxed)
        }
    }

    /// Balances one `suspend()`; on an inactive queue with no suspension, activates it. More
    /// resumes than suspends is a misuse that stops the process.
    public func resume() {
        guard !isRoot else { return }
        lock.lock()
        if state.suspendCount == 0 {
            if state.lifecycle == .inactive {
                lock.unlock()
                return activate()
            }
            let count = state.suspendCount
            lock.unlock()
            misuse(
                "\(described).resume() called more times than suspend() (suspend count is \(count)): "
                    + "it would go below zero. Fix: call resume() once for each earlier suspend().")
        }
        state.suspendCount -= 1
        suspended.store(state.suspendCount, ordering: .relaxed)
        let start = state.suspendCount == 0 ? planStartLocked() : .nothing
        lock.unlock()
        carryOut(start)
    }

    /// Lets an `initiallyInactive` queue start running its entries. No effect on an active queue.
    public func activate() {
        guard !isRoot else { return }
        lock.lock()
        guard state.lifecycle == .inactive else { return lock.unlock() }
        state.lifecycle = .active
        let start = planStartLocked()
        lock.unlock()
        carryOut(start)
    }

    // MARK: Queue-specific data

    /// Associates `value` with `key` on this queue (nil removes it), like
    /// `DispatchQueue.setSpecific(key:value:)`. Read it back with `getSpecific(key:)` on the queue,
    /// or, from work running on the queue or on a queue that targets it, with the static
    /// `TKDispatchQueue.getSpecific(key:)`.
    public func setSpecific<T: Sendable>(key: TKDispatchSpecificKey<T>, value: T?) {
        lock.withLock { specifics[key.id] = value }
    }

    /// The value set on this queue for `key` (not its targets').
    public func getSpecific<T: Sendable>(key: TKDispatchSpecificKey<T>) -> T? {
        lock.withLock { specifics[key.id] } as? T
    }

    /// The value for `key` of the queue the caller is running on, or else of its targets (nil
    /// outside any queue).
    public static func getSpecific<T: Sendable>(key: TKDispatchSpecificKey<T>) -> T? {
        var queue = DispatchContext.existing?.innermost
        if queue == nil, MainQueueDriver.onMainThread { queue = .main }
        while let q = queue {
            if let value = q.getSpecific(key: key) { return value }
            queue = q.target
        }
        return nil
    }
}

// MARK: - TKDispatch

/// dispatchMain().
public enum TKDispatch {
    /// Serves the main queue forever on the main thread (runs the main run loop forever).
    /// Called from another thread it is a misuse that stops the process.
    public static func main() -> Never {
        MainQueueDriver.serveForever()
    }
}
