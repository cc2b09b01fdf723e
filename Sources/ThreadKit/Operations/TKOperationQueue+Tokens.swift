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
// Tokens bind late: a token pops whatever is best when it runs. So that an operation still runs
// at its QoS (and a queue's operations on its current `underlyingQueue`), a token whose next
// operation wants another pool level, or whose queue changed its underlying queue, moves there
// (resubmits itself, still counted) instead of running it.
extension TKOperationQueue {
    /// What a locked section decided; carried out after unlocking.
    struct Plan {
        var tokens = 0
        var qos = TKQualityOfService.default
        var underlying: TKDispatchQueue?
        /// The last unfinished operation finished with threads waiting for it.
        var wakeWaiters = false
    }

    /// A token runs at most this many operations before going to the back of the pool's FIFO, so
    /// a busy queue does not keep a worker from other queues of its level.
    static let tokenBudget = 128

    /// Tokens to submit so that one is looking while an operation may start: zero or one (a plan
    /// never adds a second looker; the hand-off in `runToken` fans tokens out). Caller holds lock.
    /// `callerWillLook`: the caller is this queue's token, its operation already finished, about
    /// to pop again: it counts as looking (a dependency chain then runs on one token).
    func planTokensLocked(qos: TKQualityOfService, callerWillLook: Bool = false) -> Plan {
        lock.assertHeld("TKOperationQueue.lock")
        var plan = Plan(qos: qos, underlying: core.underlying)
        guard !core.suspended else { return plan }
        let wanted = min(core.ready.count, core.limit - core.executing + (callerWillLook ? 1 : 0), 1)
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
        } else {
            // New tokens are there to look for operations side by side: to the pool's shared run
            // queues, never the submitting worker's local queue, where they would wait behind the
            // token that submitted them.
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
        lock.lock()
        while true {
            guard !core.suspended, core.executing < core.limit, !core.ready.isEmpty else {
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
            core.executing += 1
            core.tokensInOperations += 1
            // The hand-off: this token stops looking; if another operation may start and no
            // token looks, the next one goes out now (this operation may block, or run long),
            // at the QoS of the operation it will find first. Added to what a finish planned.
            let next = planTokensLocked(qos: core.ready.first?.explicitQualityOfService ?? core.qos)
            if next.tokens > 0 {
                plan.tokens += next.tokens
                plan.qos = next.qos
                plan.underlying = next.underlying
            }
            lock.unlock()
            carryOut(plan)
            plan = Plan()
            context.runningOperation = operation
            context.finishedInline = false
            operation.runFromQueue()
            let inline = context.finishedInline
            context.runningOperation = nil
            budget -= 1
            lock.lock()
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
}
