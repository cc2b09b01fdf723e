// TKDispatchQueue+Sync: `sync` (docs/DispatchQueues.md, "Sync"): deadlock detection, the inline fast
// path on the caller's thread, and the slow path through a SyncWaiter entry: the drainer hands the
// queue to the waiting caller, which runs its block on its own thread (the main queue excepted).

extension TKDispatchQueue {
    /// Runs `work` on this queue and returns its result, after everything submitted before it (for
    /// a barrier on a concurrent queue: alone). Runs on the caller's thread, as libdispatch does:
    /// at once when the queue (and each custom queue up its target chain) can be entered; otherwise
    /// the caller waits in the queue's FIFO until the drainer reaches it and hands the queue over
    /// (then it takes the rest of the chain the same way). Only a chain that ends at the main queue
    /// runs the block on the main thread, which drains it. `sync` onto a queue the caller is
    /// running on (directly or through its targets) is a misuse that stops the process.
    public func sync<T>(flags: WorkFlags = [], execute work: () throws -> T) rethrows -> T {
        let barrier = flags.contains(.barrier)
        // To the lock-order checker an exclusive sync is taking a lock: the queue (§1).
        let ordered = DiagnosticsSwitch.isOn(.lockOrder) && (kind != .concurrent || barrier) && !isRoot
        if ordered { LockOrder.acquire(orderLabel, kind: "TKDispatchQueue") }
        defer { if ordered { LockOrder.release(orderLabel) } }
        return try syncHelper(barrier: barrier, work, rescue: { throw $0 })
    }

    /// `rescue` rethrows the error the block threw on the main thread: a rethrowing function may
    /// throw only through its closure parameters.
    private func syncHelper<T>(barrier: Bool, _ work: () throws -> T, rescue: (any Error) throws -> T) rethrows -> T {
        let context = DispatchContext.current
        checkSyncDeadlock(context, barrier: barrier)
        switch kind {
        case .root:
            context.push(self, exclusive: false)
            defer { context.pop() }
            return try work()
        case .main:
            break
        case .serial, .concurrent:
            if !barrier, kind == .concurrent, context.frame(for: self) != nil {
                // Already inside this concurrent queue, sharing it: no barrier can be running.
                context.push(self, exclusive: false)
                defer { context.pop() }
                return try work()
            }
            if !chainEndsAtMain {
                if !tryEnterInline(barrier: barrier) {
                    let start = Contention.start() // counters (docs/Diagnostics.md §3)
                    let waiting = WaitGraph.begin(self, .queueSync, "TKDispatchQueue.sync") // who waits for whom (§6)
                    acquireForSync(barrier: barrier)
                    WaitGraph.end(waiting)
                    Contention.queueWaited(label, since: start)
                }
                let pushed = pushChainFrames(context, barrier: barrier)
                // The caller runs the queue now: a `sync` waiting for it names this thread (§6).
                let running = WaitGraph.beginRunning(self, exclusive: kind == .serial || barrier)
                defer {
                    if running { WaitGraph.endRunning(self) }
                    for _ in 0..<pushed { context.pop() }
                    leaveInline(barrier: barrier)
                }
                return try work()
            }
        }
        // The main queue (or a chain ending there): the main thread runs the block.
        let result = withoutActuallyEscaping(work) { escapable -> Result<T, any Error> in
            let box = SyncResult<T>()
            let waiter = SyncWaiter { box.value = Result { try escapable() } }
            enqueue(DispatchEntry(.sync(waiter), barrier: barrier))
            let start = Contention.start()
            let waiting = WaitGraph.begin(self, .queueSync, "TKDispatchQueue.sync") // who waits for whom (§6)
            waiter.waitForDrainer()
            WaitGraph.end(waiting)
            Contention.queueWaited(label, since: start)
            return box.value!
        }
        switch result {
        case .success(let value): return value
        case .failure(let error): return try rescue(error)
        }
    }

    /// Whether this queue or one up its target chain is the main queue.
    private var chainEndsAtMain: Bool {
        var queue: TKDispatchQueue? = self
        while let q = queue {
            if q.kind == .main { return true }
            queue = q.target
        }
        return false
    }

    /// The slow path (libdispatch's `_dispatch_sync_f_slow` and `_dispatch_sync_recurse`): takes
    /// this queue (exclusively if serial or `barrier`, else one unit of width), then each custom
    /// queue up the chain (sharing concurrent ones), one level at a time. At a level that cannot be
    /// entered at once the caller enqueues a hand-off waiter and parks; the drainer that reaches it
    /// leaves the queue in exactly the state an inline entry would (serial: `ownedBySync`;
    /// concurrent: width or the barrier taken by the pump) and wakes the caller. Holding a level
    /// while waiting for the next is what libdispatch does; nothing can wait on it in the other
    /// direction without being the deadlock misuse checked above.
    private func acquireForSync(barrier: Bool) {
        if !enterOne(barrier: barrier) {
            let waiter = SyncWaiter()
            enqueue(DispatchEntry(.sync(waiter), barrier: barrier))
            waiter.waitForDrainer()
        }
        if let t = target, !t.isRoot, !t.tryEnterInline(barrier: false) {
            t.acquireForSync(barrier: false)
        }
    }

    // MARK: Deadlock detection

    /// Stops the process if the caller would wait for itself: it holds this queue or one of its
    /// targets exclusively, or holds this queue at all while asking for a barrier, or is the main
    /// thread syncing onto the main queue (directly or through targets).
    private func checkSyncDeadlock(_ context: DispatchContext, barrier: Bool) {
        let onMainThread = MainQueueDriver.onMainThread
        if context.frames.isEmpty && !onMainThread { return }
        var queue: TKDispatchQueue? = self
        var isTarget = false
        while let q = queue, !q.isRoot {
            if q.kind == .main && onMainThread {
                syncDeadlock(
                    via: q, isTarget: isTarget, barrier: barrier,
                    why: "the main queue runs only on the main thread, which would be waiting in sync")
            }
            if let frame = context.frame(for: q), frame.exclusive || (!isTarget && barrier) {
                syncDeadlock(
                    via: q, isTarget: isTarget, barrier: barrier,
                    why: frame.exclusive
                        ? "the calling thread is running \(q.described) and holds it exclusively"
                        : "the calling thread is running an item of \(q.described), which a barrier must wait for")
            }
            queue = q.target
            isTarget = true
        }
    }

    private func syncDeadlock(via q: TKDispatchQueue, isTarget: Bool, barrier: Bool, why: String) -> Never {
        let call = barrier ? "sync(flags: .barrier)" : "sync"
        let route = isTarget ? " (\(described) runs on it through its target chain)" : ""
        misuse(
            "\(described).\(call) would deadlock: \(why)\(route), so the block could never start. "
                + "Fix: use async instead, or call the work directly when already on \(q.described).")
    }

    // MARK: The inline fast path

    /// Enters this queue (exclusively if serial or `barrier`) and every custom queue up the target
    /// chain (serial ones exclusively, concurrent ones sharing), or nothing at all.
    private func tryEnterInline(barrier: Bool) -> Bool {
        guard enterOne(barrier: barrier) else { return false }
        if let t = target, !t.isRoot, !t.tryEnterInline(barrier: false) {
            leaveOne(barrier: barrier)
            return false
        }
        return true
    }

    private func leaveInline(barrier: Bool) {
        leaveOne(barrier: barrier)
        if let t = target, !t.isRoot { t.leaveInline(barrier: false) }
    }

    /// Frames for the chain, outermost first (so this queue is innermost). Returns how many.
    private func pushChainFrames(_ context: DispatchContext, barrier: Bool) -> Int {
        var pushed = 0
        if let t = target, !t.isRoot { pushed = t.pushChainFrames(context, barrier: false) }
        context.push(self, exclusive: kind == .serial || barrier)
        return pushed + 1
    }

    private func enterOne(barrier: Bool) -> Bool {
        lock.withLock {
            guard state.lifecycle == .active, state.suspendCount == 0, pending.isEmpty else { return false }
            switch kind {
            case .serial:
                guard state.lane == .idle else { return false }
                state.lane = .ownedBySync
                return true
            case .concurrent:
                guard !state.barrierRunning else { return false }
                if barrier {
                    guard state.inFlight == 0 else { return false }
                    state.barrierRunning = true
                } else {
                    state.inFlight += 1
                }
                return true
            case .root, .main:
                return false
            }
        }
    }

    private func leaveOne(barrier: Bool) {
        switch kind {
        case .serial:
            lock.lock()
            if state.lifecycle == .active, state.suspendCount == 0, let head = pending.first,
                case .sync(let waiter) = head.work, waiter.handsOff
            {
                // The next entry is another `sync` caller: the lane stays `ownedBySync` and goes
                // straight to it, with no drain scheduled on a pool worker in between.
                _ = pending.popFirst()
                lock.unlock()
                waiter.handOff()
                return
            }
            state.lane = .idle
            let start = planStartLocked()
            let look = settleRingsLocked() // a lane handed to `sync` may end a burst's drain
            lock.unlock()
            carryOut(start)
            if look { scheduleRingLook() }
        case .concurrent:
            finishConcurrent(barrier: barrier)
        case .root, .main:
            break
        }
    }
}

// safety: written by the drainer before it sets the waiter's event and read by the caller after
// its wait returns: the event's release and acquire order the two.
/// The result of a block run by the drainer for a waiting `sync` caller. Written by the drainer
/// before it sets the waiter's event; read by the caller after.
final class SyncResult<T>: @unchecked Sendable {
    var value: Result<T, any Error>?
}

// safety: `block` is set before the entry is published by the queue's lock and cleared by the
// drainer before it sets `done`, which the caller waits for; the rest is immutable.
/// A `sync` caller waiting in a queue. A hand-off waiter (no block): the drainer that reaches it
/// hands the queue over (`handOff`) and the caller runs its block on its own thread. A main-queue
/// waiter (a block): the main thread runs the block with the queue's exclusion in force, drops it,
/// then wakes the caller.
final class SyncWaiter: @unchecked Sendable {
    /// Set by the caller before the entry is enqueued (published by the queue's lock); run and
    /// cleared by the drainer before it sets `done`. Nil for a hand-off waiter.
    private var block: (() -> Void)?
    /// Whether the drainer hands the queue to the caller instead of running a block. Immutable.
    let handsOff: Bool
    private let done = ParkingEvent()

    /// A hand-off waiter.
    init() { handsOff = true }

    /// A waiter whose block the drainer runs (chains ending at the main queue).
    init(_ block: @escaping () -> Void) {
        self.block = block
        handsOff = false
    }

    /// Drainer's thread. The block is released before the caller is woken: the caller's
    /// `withoutActuallyEscaping` requires that nothing holds it when the call returns. A hand-off
    /// waiter never gets here: the lanes hand the queue over before running an entry.
    func runOnDrainer() {
        precondition(!handsOff, "a sync hand-off waiter reached DispatchEntry.run")
        block?()
        block = nil
        done.set()
    }

    /// Drainer's thread, after it has left the queue in the caller's hands: wakes the caller.
    func handOff() {
        done.set()
    }

    /// Caller's thread: spin briefly, then park (through Parking: a pool worker waiting here lets
    /// another worker run).
    func waitForDrainer() {
        _ = done.wait(spinLimit: DispatchSpin.longWait, observed: true, retryThreadStarts: true)
    }
}
