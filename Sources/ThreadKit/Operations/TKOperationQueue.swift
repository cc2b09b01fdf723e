// TKOperationQueue: NSOperationQueue (SPEC §7), on ThreadKit's dispatch pool. Thread-safe: every
// public member may be called from any thread. The design is docs/Operations.md.
//
// How operations run: the queue never submits one dispatch job per operation. It submits
// *tokens* (TKOperationQueue+Tokens.swift) to the global queue of its QoS, or to its
// `underlyingQueue`; a token, on a pool worker, pops the best ready operation (priority, then FIFO),
// runs it, and pops the next, until nothing may start (then it ends) or its budget is spent (then
// it goes to the back of the pool). `maxConcurrentOperationCount` bounds the operations executing
// (an asynchronous one counts until it finishes, though its token has moved on).
//
// Who touches what: `lock` (a DispatchLock) guards `core` — the settings, the ready list, the
// barrier epochs, the list of unfinished operations, and the counts. Nothing else is locked while
// it is held (it is the innermost lock of the operation layer: DependencyGraph.lock →
// TKOperation.lock → TKOperationQueue.lock), no user code runs under it, and tokens are submitted
// and waiters woken after it is released (from a `Plan`). `drained` is the futex word that
// `waitUntilAllOperationsAreFinished` parks on: bumped under `lock`, woken after. `isMain` is
// immutable.

import Synchronization

// safety: `core` is touched only under `lock`; `drained` and `mayStart` are atomic; the rest is
// immutable.
/// Runs operations on ThreadKit's dispatch pool, respecting dependencies, priorities, barriers and
/// a concurrency limit.
public final class TKOperationQueue: @unchecked Sendable {
    /// "As many as the system allows": the pool's thread cap, so operations that block in
    /// ThreadKit waits are replaced by others up to what the pool will ever run at once.
    public static let defaultMaxConcurrentOperationCount: Int = -1
    static var systemWidth: Int { DispatchPool.shared.threadCap }

    private static let mainQueue = TKOperationQueue(mainThread: ())

    /// The queue of the main thread: one operation at a time, run by the main run loop through
    /// `TKDispatchQueue.main`.
    public static var main: TKOperationQueue { mainQueue }

    /// The queue whose operation is running on the calling thread; on the main thread outside any
    /// operation, `main` (as NSOperationQueue's `currentQueue`); nil on other threads outside
    /// operations.
    public static var current: TKOperationQueue? {
        if let queue = OperationContext.existing?.queue { return queue }
        return TKThread.isMainThread ? mainQueue : nil
    }

    /// Everything guarded by `lock`.
    struct Core {
        var name: String?
        var maxCount = TKOperationQueue.defaultMaxConcurrentOperationCount
        /// `maxCount` with -1 replaced by `systemWidth`.
        var limit = TKOperationQueue.systemWidth
        var qos = TKQualityOfService.default
        var underlying: TKDispatchQueue?
        var suspended = false
        /// Operations added and not finished (`operationCount`), and threads waiting for zero.
        var unfinished = 0
        var waiters = 0
        /// Operations popped and not finished (asynchronous ones included).
        var executing = 0
        /// Tokens submitted and not ended, and those of them inside an operation right now.
        var tokens = 0
        var tokensInOperations = 0
        /// The last operation a token ran took less than `shortOperationNanoseconds`.
        var shortOperations = false
        var ready = ReadyQueue()
        var epochs = BarrierEpochs()
        /// Unfinished operations, oldest first (for cancelAllOperations), linked through the
        /// operations' `queueNext`/`queuePrev`.
        var head: TKOperation?
        unowned(unsafe) var tail: TKOperation?

        // The epochs move operations into the ready list: one access to `core` (a class property)
        // for both, where two overlapping ones would be an exclusivity violation.
        mutating func releaseBarrierIfDue() { epochs.releaseBarrierIfDue(into: &ready) }
        mutating func epochFinished(_ operation: TKOperation) { epochs.finished(operation, into: &ready) }
    }

    let lock = DispatchLock()
    var core = Core() // guarded by lock
    /// Bumped (under lock) whenever an operation may start; a lingering token polls it without the
    /// lock (TKOperationQueue+Tokens, `linger`). Relaxed: a hint; the token looks again under lock.
    let mayStart = Atomic<Int>(0)
    let drained = FutexWord(0)
    let isMain: Bool

    /// Creates a queue like `OperationQueue()`: no name, `maxConcurrentOperationCount` of
    /// `defaultMaxConcurrentOperationCount` (-1, the system chooses), `.default` QoS, running its
    /// operations on the global pool, not suspended.
    public init() {
        isMain = false
    }

    private init(mainThread: ()) {
        isMain = true
        core.name = "TKOperationQueue.main"
        core.maxCount = 1
        core.limit = 1
        core.qos = .userInteractive
        core.underlying = TKDispatchQueue.main
    }

    /// How misuse messages name the queue.
    var described: String {
        if let name { return "TKOperationQueue \"\(name)\"" }
        return "TKOperationQueue \(Unmanaged.passUnretained(self).toOpaque()) (unnamed)"
    }

    var isSerial: Bool { lock.withLock { core.limit == 1 } }

    // MARK: Settings

    /// A name for debugging, used in misuse messages; nil by default (`TKOperationQueue.main`
    /// is named "TKOperationQueue.main"). Thread-safe.
    public var name: String? {
        get { lock.withLock { core.name } }
        set { lock.withLock { core.name = newValue } }
    }

    /// How many operations may execute at once: -1 (the default) lets the system choose; 1 makes
    /// a serial queue (ready operations start one at a time, by priority then in the order added);
    /// 0 starts nothing. Below -1 is a misuse.
    public var maxConcurrentOperationCount: Int {
        get { lock.withLock { core.maxCount } }
        set {
            if newValue < -1 {
                misuse(
                    "\(described).maxConcurrentOperationCount = \(newValue): the limit must be -1 (system-chosen) or 0 and above. "
                        + "Fix: use TKOperationQueue.defaultMaxConcurrentOperationCount, or a positive count.")
            }
            if isMain && newValue != 1 {
                misuse(
                    "TKOperationQueue.main.maxConcurrentOperationCount = \(newValue): the main queue runs one operation at a "
                        + "time on the main thread. Fix: use a TKOperationQueue of your own for concurrent work.")
            }
            lock.lock()
            core.maxCount = newValue
            core.limit = newValue == -1 ? TKOperationQueue.systemWidth : newValue
            let plan = planTokensLocked(qos: core.qos)
            lock.unlock()
            carryOut(plan)
        }
    }

    /// The QoS of the pool work that runs operations that have none of their own. Ignored while an
    /// `underlyingQueue` is set (its QoS applies).
    public var qualityOfService: TKQualityOfService {
        get { lock.withLock { core.qos } }
        set { lock.withLock { core.qos = newValue } }
    }

    /// A dispatch queue to run the operations on instead of the global pool. Set it while the
    /// queue holds no operations; the main queue's is `TKDispatchQueue.main` and cannot change.
    public var underlyingQueue: TKDispatchQueue? {
        get { lock.withLock { core.underlying } }
        set {
            if isMain {
                misuse(
                    "TKOperationQueue.main.underlyingQueue set: the main queue always runs on TKDispatchQueue.main. "
                        + "Fix: set underlyingQueue on a TKOperationQueue of your own.")
            }
            if let newValue, newValue === TKDispatchQueue.main {
                misuse(
                    "\(described).underlyingQueue = TKDispatchQueue.main: only TKOperationQueue.main runs on the main "
                        + "queue. Fix: add the operations to TKOperationQueue.main instead.")
            }
            lock.lock()
            let count = core.unfinished
            if count == 0 { core.underlying = newValue }
            lock.unlock()
            if count != 0 {
                misuse(
                    "\(described).underlyingQueue set while the queue holds \(count) unfinished operations: they were "
                        + "promised to the old one. Fix: set underlyingQueue before adding operations, or after "
                        + "waitUntilAllOperationsAreFinished().")
            }
        }
    }

    /// While true, no operation starts (those executing go on); operations may still be added.
    public var isSuspended: Bool {
        get { lock.withLock { core.suspended } }
        set {
            lock.lock()
            core.suspended = newValue
            let plan = newValue ? Plan() : planTokensLocked(qos: core.qos)
            lock.unlock()
            carryOut(plan)
        }
    }

    /// Operations added and not yet finished (a snapshot).
    public var operationCount: Int { lock.withLock { core.unfinished } }

    // MARK: Adding

    /// Adds `operation`; it starts when it is ready, a slot is free and the queue is not
    /// suspended. Adding an operation twice, to two queues, or after it started, is a misuse.
    public func addOperation(_ operation: TKOperation) {
        add(operation, barrier: false, caller: "addOperation(_:)")
    }

    /// Wraps `block` in a TKBlockOperation and adds it.
    public func addOperation(_ block: @escaping @Sendable () -> Void) {
        add(TKBlockOperation(block: block), barrier: false, caller: "addOperation(_:)")
    }

    /// Adds the operations in order; with `wait`, returns when all have finished and run their
    /// completion blocks (a ThreadKit wait, seen by the pool). The queue's own count may trail by a
    /// moment; `waitUntilAllOperationsAreFinished` waits for that too.
    public func addOperations(_ operations: [TKOperation], waitUntilFinished wait: Bool) {
        for operation in operations { add(operation, barrier: false, caller: "addOperations(_:waitUntilFinished:)") }
        if wait {
            for operation in operations { operation.waitUntilFinished() }
        }
    }

    /// Runs `barrier` after every operation added before it has finished, and before any operation
    /// added after it starts.
    public func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        add(TKBlockOperation(block: barrier), barrier: true, caller: "addBarrierBlock(_:)")
    }

    private func add(_ operation: TKOperation, barrier: Bool, caller: String) {
        var plan = Plan()
        let qos = operation.explicitQualityOfService
        let refusal = operation.claim(for: self) {
            lock.lock()
            defer { lock.unlock() }
            guard register(operation, barrier: barrier) else { return false }
            plan = planTokensLocked(qos: qos ?? core.qos)
            return true
        }
        if let refusal {
            let what: String
            switch refusal {
            case .alreadyAdded(let owner): what = "was already added to " + (owner === self ? "this queue" : owner.described)
            case .started: what = "has already started (by hand)"
            case .finished: what = "has already finished"
            }
            misuse(
                "\(described).\(caller) was given \(operation.described), which \(what). Fix: add an operation to one "
                    + "queue, once, before it starts; create a new operation for new work.")
        }
        carryOut(plan)
    }

    /// Links the operation into the queue and its epoch, publishes it as enqueued, and if it is
    /// ready already, dispatches it in the same locked section. Returns false (registering
    /// nothing) if the operation was started by hand meanwhile. Caller holds lock.
    private func register(_ operation: TKOperation, barrier: Bool) -> Bool {
        if barrier {
            link(operation)
            operation.isBarrier = true
            core.epochs.addBarrier(operation)
            // Barriers are released by their epoch, never by tryDispatch.
            operation.state.bitwiseOr(OperationState.enqueued | OperationState.dispatched, ordering: .acquiringAndReleasing)
            core.releaseBarrierIfDue()
            return true
        }
        var s = operation.state.load(ordering: .acquiring)
        while true {
            if OperationState.phase(s) != OperationState.pending { return false }
            var new = s | OperationState.enqueued
            if OperationState.isReady(s) { new |= OperationState.dispatched }
            // Releasing: publishes `queue` (written in claim) to whoever sees `enqueued`. Anyone
            // who sees it takes this lock before touching the books, so linking after is fine.
            let (exchanged, original) = operation.state.compareExchange(expected: s, desired: new, ordering: .acquiringAndReleasing)
            if exchanged {
                link(operation)
                core.epochs.add(operation)
                if new & OperationState.dispatched != 0 { pushLocked(operation) }
                return true
            }
            s = original
        }
    }

    /// Appends the operation to the list of unfinished ones. Caller holds lock.
    private func link(_ operation: TKOperation) {
        core.unfinished += 1
        operation.queueNext = nil
        operation.queuePrev = core.tail
        if let tail = core.tail { tail.queueNext = operation } else { core.head = operation }
        core.tail = operation
    }

    // MARK: Cancelling and waiting

    /// Cancels every operation in the queue: those not started finish without running; those
    /// executing see `isCancelled`. Barriers are operations too: a cancelled barrier's block does
    /// not run, though it still separates the operations before it from those after.
    public func cancelAllOperations() {
        var operations: [TKOperation] = []
        lock.lock()
        operations.reserveCapacity(core.unfinished)
        var next = core.head
        while let operation = next {
            operations.append(operation)
            next = operation.queueNext
        }
        lock.unlock()
        for operation in operations { operation.cancel() }
    }

    /// Blocks until the queue holds no unfinished operation (or has held none at some moment since
    /// the call began). A ThreadKit wait, seen by the pool. Called from one of this queue's own
    /// operations, or on the main thread for the main queue, it would wait forever: a misuse.
    public func waitUntilAllOperationsAreFinished() {
        lock.lock()
        if core.unfinished == 0 { return lock.unlock() }
        let count = core.unfinished
        if let context = OperationContext.existing, context.queue === self, context.runningOperation != nil {
            lock.unlock()
            misuse(
                "\(described).waitUntilAllOperationsAreFinished() called from one of its own operations: that operation "
                    + "is among those waited for, so it would wait forever (\(count) unfinished). Fix: wait from outside the "
                    + "queue, or use a barrier block or dependencies.")
        }
        if isMain && TKThread.isMainThread {
            lock.unlock()
            misuse(
                "TKOperationQueue.main.waitUntilAllOperationsAreFinished() called on the main thread with \(count) "
                    + "unfinished operations: they run on this very thread, so it would wait forever. Fix: let the main "
                    + "run loop run, and learn of completion through a completionBlock or a barrier block.")
        }
        let seen = drained.pointer.pointee.load(ordering: .relaxed)
        core.waiters += 1
        lock.unlock()
        // Until the thread that finishes the last one bumps the word (under lock, releasing).
        OperationEvent.wait(on: drained, whileEqualTo: seen)
        lock.withLock { core.waiters -= 1 }
    }
}
