// TKOperationQueue+Tokens: how a queue's operations reach threads (docs/Operations.md, "Tokens").
// Decisions are made under the queue's lock and returned as a `Plan`; tokens are submitted and
// waiters woken after it is released. A token runs on a pool worker (or the queue's
// `underlyingQueue`, the main thread for the main queue).
//
// Token accounting, all under lock: `tokens` counts tokens submitted and not ended;
// `tokensInOperations` those of them inside an operation's `start()`; the rest are *looking*
// (waiting in the pool, or about to pop). At most one token looks at a time: whenever something
// may let an operation start (one became ready, one finished, a resume, a higher limit) and no
// token looks, the queue submits one; and a token that pops an operation while more may start and
// no other token looks submits the next (the hand-off), before it runs its own. So tokens fan out
// one at a time while ready operations remain, as the pool's searching workers do, instead of one
// per ready operation (up to the thread cap) that mostly found nothing left and ended; and
// operations that block (in ThreadKit waits, which the pool sees) hold their tokens while the
// queue's other ready operations get tokens of their own: eight operations that each wait one
// second, with a limit of 8, finish together in about one second.
//
// Short operations (under 5 µs, the last one a token ran): the hand-off goes out even with nothing
// ready yet, as a continuation in the worker's local queue that wakes nobody; and a token that
// finds nothing ready lingers, polling `mayStart` as an idle worker polls for work, before it ends.
// A stream of short operations from one producer then runs on one token without the pool's lock
// (docs/Operations.md, "Short operations").
//
// Tokens bind late: a token pops whatever is best when it runs. So that an operation still runs
// at its QoS (and a queue's operations on its current `underlyingQueue`), a token whose next
// operation wants another pool level, or whose queue changed its underlying queue, moves there
// (resubmits itself, still counted) instead of running it.
import Synchronization

extension TKOperationQueue {
    /// What a locked section decided; carried out after unlocking.
    struct Plan {
        var tokens = 0
        var qos = TKQualityOfService.default
        var underlying: TKDispatchQueue?
        /// The last unfinished operation finished with threads waiting for it.
        var wakeWaiters = false
        /// The token is a hand-off made while the queue's operations run short: it goes to the
        /// worker's local queue as a continuation, which wakes nobody ("Short operations").
        var continuation = false
    }

    /// A token runs at most this many operations before going to the back of the pool's FIFO, so
    /// a busy queue does not keep a worker from other queues of its level.
    static let tokenBudget = 128

    /// An operation that ran for less than this is short ("Short operations").
    static let shortOperationNanoseconds: UInt64 = 5_000

    /// Tokens to submit so that one is looking while an operation may start: zero or one (a plan
    /// never adds a second looker; the hand-off in `runToken` fans tokens out). Caller holds lock.
    /// `callerWillLook`: the caller is this queue's token, its operation already finished, about
    /// to pop again: it counts as looking (a dependency chain then runs on one token).
    func planTokensLocked(qos: TKQualityOfService, callerWillLook: Bool = false, anticipating: Bool = false) -> Plan {
        lock.assertHeld("TKOperationQueue.lock")
        var plan = Plan(qos: qos, underlying: core.underlying)
        guard !core.suspended else { return plan }
        let wanted = min(
            max(core.ready.count, anticipating ? 1 : 0), core.limit - core.executing + (callerWillLook ? 1 : 0), 1)
        if wanted > 0 { mayStart.wrappingAdd(1, ordering: .relaxed) }
        let looking = core.tokens - core.tokensInOperations + (callerWillLook ? 1 : 0)
        if wanted > looking {
            plan.tokens = wanted - looking
            core.tokens += plan.tokens
        }
        return plan
    }

    /// `planTokensLocked` at the queue's QoS, into a plan that may already wake waiters.
    func planMoreTokensLocked(_ plan: inout Plan) {
        lock.assertHeld("TKOperationQueue.lock")
        let more = planTokensLocked(qos: core.qos)
        plan.tokens = more.tokens
        plan.qos = more.qos
        plan.underlying = more.underlying
    }

    func carryOut(_ plan: Plan) {
        if plan.wakeWaiters { Parking.unparkAll(drained) }
        for _ in 0..<plan.tokens { submitToken(plan) }
    }

    private func submitToken(_ plan: Plan, resubmitted: Bool = false) {
        let qos = plan.qos
        let underlying = plan.underlying
        let token: @Sendable () -> Void = { [self] in runToken(qos: qos, underlying: underlying) }
        if let underlying = plan.underlying {
            underlying.async(execute: token)
        } else if resubmitted {
            // A token that used up its budget goes behind other work of its level: from a pool
            // worker, that worker's local queue (docs/DispatchPool.md), so it does not wake another.
            TKDispatchQueue.global(qos: qos).async(execute: token)
        } else if plan.continuation {
            // It waits for the token that handed off (`handOffLocked`): that worker's local queue,
            // where it wakes nobody.
            DispatchPool.shared.submit(DispatchEntry(.block(token)), level: RunQueues.level(qos))
        } else {
            // Other new tokens are there to look for operations side by side: to the pool's shared
            // run queues, never the submitting worker's local queue, where they would wait behind
            // the token that submitted them.
            DispatchPool.shared.submit(DispatchEntry(.block(token)), level: RunQueues.level(qos), count: 1)
        }
    }

    // MARK: Ready operations

    /// `operation` became ready (its last dependency resolved, or it was cancelled) after it was
    /// added: to the ready list, or held behind a barrier.
    func pushReady(_ operation: TKOperation) {
        var callerWillLook = false
        if let context = OperationContext.existing, context.queue === self, context.finishedInline {
            callerWillLook = true
        }
        lock.lock()
        pushLocked(operation)
        let plan = planTokensLocked(qos: operation.explicitQualityOfService ?? core.qos, callerWillLook: callerWillLook)
        lock.unlock()
        carryOut(plan)
    }

    /// Caller holds lock.
    func pushLocked(_ operation: TKOperation) {
        lock.assertHeld("TKOperationQueue.lock")
        if core.epochs.admit(operation) {
            core.ready.push(operation, level: ReadyQueue.level(operation.queuePriority))
        }
    }

    // MARK: Finishing

    /// An operation of this queue finished away from the token that started it (an asynchronous
    /// operation's `finish()`, or one finished on another thread).
    func operationDidFinish(_ operation: TKOperation) {
        var plan = Plan()
        lock.lock()
        finishLocked(operation, &plan)
        planMoreTokensLocked(&plan)
        lock.unlock()
        carryOut(plan)
    }

    /// Removes a finished operation from the queue's books: its slot, its place in the list, its
    /// epoch (which may release a barrier or open the next epoch), the unfinished count (which may
    /// release waiters). Caller holds lock; tokens are planned by the caller afterwards.
    func finishLocked(_ operation: TKOperation, _ plan: inout Plan) {
        lock.assertHeld("TKOperationQueue.lock")
        core.executing -= 1
        if let next = operation.queueNext { next.queuePrev = operation.queuePrev } else { core.tail = operation.queuePrev }
        if let previous = operation.queuePrev { previous.queueNext = operation.queueNext } else { core.head = operation.queueNext }
        operation.queueNext = nil
        operation.queuePrev = nil
        core.epochFinished(operation)
        core.unfinished -= 1
        if core.unfinished == 0 && core.waiters > 0 {
            // Releasing: pairs with the waiters' acquiring loads of the word.
            drained.pointer.pointee.wrappingAdd(1, ordering: .releasing)
            plan.wakeWaiters = true
        }
    }

    // MARK: The token

    /// Pops and runs ready operations while one may start, at most `tokenBudget` of them. One lock
    /// visit per operation: the bookkeeping of an operation that finished inside `start()` is done
    /// in the same locked section that pops the next. `qos`: the pool level this token runs at; an
    /// operation that wants another level (its own QoS, or the queue's) is not run here: the token
    /// moves to that level instead (still counted), so background work never runs on the pool's
    /// background tier by accident and the reverse.
    func runToken(qos: TKQualityOfService, underlying: TKDispatchQueue?) {
        let context = OperationContext.current
        let outerQueue = context.queue
        let outerOperation = context.runningOperation
        let outerInline = context.finishedInline
        context.queue = self
        defer {
            context.queue = outerQueue
            context.runningOperation = outerOperation
            context.finishedInline = outerInline
        }
        var budget = TKOperationQueue.tokenBudget
        var plan = Plan()
        var again = false
        var lingered = false
        lock.lock()
        while true {
            guard !core.suspended, core.executing < core.limit, !core.ready.isEmpty else {
                if !lingered && mayLingerLocked(underlying, workerIsFree: DispatchPool.shared.callerIsUnneededWorker) {
                    lingered = true
                    linger(&plan)
                    continue
                }
                core.tokens -= 1
                break
            }
            let wanted = core.underlying == nil ? core.ready.first!.explicitQualityOfService ?? core.qos : qos
            if budget == 0 || RunQueues.level(wanted) != RunQueues.level(qos) || core.underlying !== underlying {
                again = true // still counted in `tokens`: it goes on looking from the pool
                plan.qos = wanted
                plan.underlying = core.underlying
                break
            }
            let operation = core.ready.pop()!
            lingered = false
            core.executing += 1
            core.tokensInOperations += 1
            let next = handOffLocked()
            if next.tokens > 0 {
                plan.tokens += next.tokens
                plan.qos = next.qos
                plan.underlying = next.underlying
                plan.continuation = next.continuation
            }
            lock.unlock()
            carryOut(plan)
            plan = Plan()
            context.runningOperation = operation
            context.finishedInline = false
            let started = RunQueues.stamp()
            operation.runFromQueue()
            let ranShort = RunQueues.stamp() &- started < TKOperationQueue.shortOperationNanoseconds
            let inline = context.finishedInline
            context.runningOperation = nil
            budget -= 1
            lock.lock()
            core.shortOperations = ranShort
            core.tokensInOperations -= 1
            if inline {
                finishLocked(operation, &plan)
                // A barrier released or an epoch opened may want more tokens than this one.
                planMoreTokensLocked(&plan)
            }
        }
        lock.unlock()
        carryOut(plan)
        if again { submitToken(plan, resubmitted: true) }
    }

    // MARK: Short operations

    /// The hand-off, planned by a token that just popped an operation (counted executing and in an
    /// operation): if another operation may start and no token looks, the next token goes out now,
    /// before this operation runs (it may block, or run long), at the QoS of the operation it will
    /// find first. While the queue's operations run short (the last one a token ran took under
    /// `shortOperationNanoseconds`, on the pool), the next token goes out even with nothing ready
    /// yet, as a continuation: to this worker's local queue, waking nobody. It is the looker a
    /// producer would otherwise start through the pool for its next operation; this token,
    /// back in a few microseconds, runs that operation itself and leaves the continuation to run
    /// after it, unless this operation blocks (the pool gives the continuation to another worker
    /// at once) or runs long (the monitor does). Caller holds lock.
    func handOffLocked() -> Plan {
        lock.assertHeld("TKOperationQueue.lock")
        let short = core.shortOperations && core.underlying == nil
        var plan = planTokensLocked(qos: core.ready.first?.explicitQualityOfService ?? core.qos, anticipating: short)
        plan.continuation = short && plan.tokens > 0
        return plan
    }

    /// Whether a token that found nothing to start may linger: only the queue is short of ready
    /// operations (not suspended, not at its limit), no other token looks, it runs on the pool (a
    /// main-queue or `underlyingQueue` token never holds its thread), and its worker has nothing
    /// else to run (`workerIsFree`, asked last). Caller holds lock.
    func mayLingerLocked(_ underlying: TKDispatchQueue?, workerIsFree: @autoclosure () -> Bool) -> Bool {
        lock.assertHeld("TKOperationQueue.lock")
        return underlying == nil && core.underlying == nil && !core.suspended && core.executing < core.limit
            && core.ready.isEmpty && core.tokens - core.tokensInOperations == 1 && workerIsFree()
    }

    /// The token stays looking (still counted, so a producer plans no new token) and polls
    /// `mayStart` for as long as an idle pool worker polls for its next job (`DispatchSpin.idleWorker`),
    /// having carried out what the last locked section planned; then the caller looks again. A
    /// producer that adds operations a little slower than tokens run them (empty operations from
    /// one thread) then feeds one lingering token, instead of ending a token and starting the next
    /// through the pool (a lock visit to park, a wake, a visit to fetch) every few operations.
    /// Called and returns with lock held (released while it polls).
    private func linger(_ plan: inout Plan) {
        let seen = mayStart.load(ordering: .relaxed)
        lock.unlock()
        carryOut(plan)
        plan = Plan()
        var spin = SpinWait(limit: DispatchSpin.idleWorker)
        while spin.spin() && mayStart.load(ordering: .relaxed) == seen {}
        lock.lock()
    }
}
