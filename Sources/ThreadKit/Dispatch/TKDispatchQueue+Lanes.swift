// TKDispatchQueue+Lanes: how entries of custom queues reach the pool and run (docs/DispatchPool.md,
// "How a work item flows", steps 2–5). Decisions are made under `lock`; submitting to the target
// and waking happen after it is released (`carryOut`).

extension TKDispatchQueue {
    /// What a locked section decided; carried out after unlocking.
    enum Start {
        case nothing
        /// Submit the serial lane to the target (or wake the main loop).
        case lane
        /// Submit this many tokens of the concurrent queue to the target.
        case tokens(Int)
        /// As `tokens`, and wake these `sync` callers, whose width (or barrier) the pump took: the
        /// thread that made room hands the queue over itself, as libdispatch does, so a waiting
        /// caller never needs a pool worker to be free (workers may all be blocked elsewhere).
        case tokensAndHandOffs(Int, [SyncWaiter])
    }

    /// Routes an entry by kind.
    func enqueue(_ entry: consuming DispatchEntry) {
        switch kind {
        case .root(let level):
            DispatchPool.shared.submit(entry, level: level)
        case .serial, .main:
            lock.lock()
            pending.append(entry)
            let start = state.lane == .idle ? planStartLocked() : .nothing
            lock.unlock()
            carryOut(start)
        case .concurrent:
            lock.lock()
            pending.append(entry)
            let start = pumpLocked()
            lock.unlock()
            carryOut(start)
        }
    }

    /// What may start now that something changed (an entry, a resume, an activation, a finish).
    /// Caller holds lock.
    func planStartLocked() -> Start {
        lock.assertHeld("TKDispatchQueue.lock")
        switch kind {
        case .root: return .nothing
        case .serial, .main:
            guard state.lane == .idle, state.lifecycle == .active, state.suspendCount == 0, !pending.isEmpty else { return .nothing }
            state.lane = .enqueued
            return .lane
        case .concurrent:
            return pumpLocked()
        }
    }

    /// Safe after the lock is released even when the caller holds the queue by an unowned
    /// reference (Swift's runtime calling the executor `enqueue`, docs/Reliability.md): every
    /// entry waiting in `pending` or `ready` whose submitter may let go (a `.job`) retains the
    /// queue, and this reads `self` only while it still owes the lane or a token. Until the lane is
    /// submitted nobody drains the serial queue; while tokens are owed, `ready` holds at least as
    /// many entries as are owed (each token pops one), so the queue stays alive.
    func carryOut(_ start: Start) {
        switch start {
        case .nothing: break
        case .lane:
            if kind == .main { MainQueueDriver.wakeMainLoop() } else { target!.enqueue(DispatchEntry(.drain(self))) }
        case .tokensAndHandOffs(let count, let waiters):
            if count > 0 { carryOut(.tokens(count)) }
            for waiter in waiters { waiter.handOff() }
        case .tokens(let count):
            if case .root(let level) = target!.kind {
                DispatchPool.shared.submit(DispatchEntry(.runNext(self)), level: level, count: count)
            } else {
                for _ in 0..<count { target!.enqueue(DispatchEntry(.runNext(self))) }
            }
        }
    }

    // MARK: Serial lanes

    /// Runs the lane of a serial queue (its `.drain` entry): batches until it is empty, suspended,
    /// or the budget is spent (then it goes to the back of its target). `maxEntries`: the budget;
    /// the main loop drains one batch per pass.
    func drainLane(maxEntries: Int = 256) {
        let context = DispatchContext.current
        context.push(self, exclusive: true)
        defer { context.pop() }
        var ran = 0
        lock.lock()
        while true {
            guard state.lifecycle == .active, state.suspendCount == 0, !pending.isEmpty else {
                state.lane = .idle
                let look = settleRingsLocked()
                lock.unlock()
                if look { scheduleRingLook() }
                return
            }
            if ran >= maxEntries {
                // Yield: back to the end of the target's FIFO (or the next main-loop pass).
                state.lane = .enqueued
                lock.unlock()
                carryOut(.lane)
                return
            }
            state.lane = .draining
            swap(&pending, &batch)
            lock.unlock()
            while let entry = batch.popFirst() {
                if suspended.load(ordering: .relaxed) > 0 {
                    // Suspended meanwhile: hand the rest back, in order, ahead of newer entries.
                    lock.lock()
                    pending.prepend(contentsOf: batch)
                    pending.prepend(entry)
                    lock.unlock()
                    break
                }
                if case .sync(let waiter) = entry.work, waiter.handsOff {
                    handOffLane(to: waiter)
                    return
                }
                entry.runObserved(on: self, exclusive: true)
                ran += 1
            }
            lock.lock()
        }
    }

    /// The drainer has reached a `sync` caller waiting in the lane: the rest of the batch goes back,
    /// in order, the lane becomes `ownedBySync` (as if the caller had entered inline) and the caller
    /// is woken to run its block on its own thread; its leaving schedules the lane again. The
    /// drainer stops draining this lane.
    private func handOffLane(to waiter: SyncWaiter) {
        lock.lock()
        pending.prepend(contentsOf: batch)
        state.lane = .ownedBySync
        lock.unlock()
        waiter.handOff()
    }

    // MARK: Concurrent queues

    /// Moves entries that may start from `pending` to `ready`, one token each: non-barrier entries
    /// while no barrier is ready or running; a barrier only when nothing is in flight, and then
    /// nothing after it. A `sync` caller's entry takes its width (or the barrier) the same way but
    /// gets no token: the caller is handed the queue (`carryOut`). Caller holds lock.
    func pumpLocked() -> Start {
        lock.assertHeld("TKDispatchQueue.lock")
        guard state.lifecycle == .active, state.suspendCount == 0, !state.barrierRunning else { return .nothing }
        var tokens = 0
        var handOffs: [SyncWaiter] = []
        func start(_ entry: DispatchEntry) {
            if case .sync(let waiter) = entry.work, waiter.handsOff {
                handOffs.append(waiter)
            } else {
                ready.append(entry)
                tokens += 1
            }
        }
        while let head = pending.first {
            if head.barrier {
                if state.inFlight == 0 {
                    state.barrierRunning = true
                    start(pending.popFirst()!)
                }
                break
            }
            state.inFlight += 1
            start(pending.popFirst()!)
        }
        if !handOffs.isEmpty { return .tokensAndHandOffs(tokens, handOffs) }
        return tokens == 0 ? .nothing : .tokens(tokens)
    }

    /// Runs the next ready entry of a concurrent queue (its `.runNext` token), then lets more start.
    func runNextReady() {
        lock.lock()
        let entry = ready.popFirst()!
        lock.unlock()
        let context = DispatchContext.current
        context.push(self, exclusive: entry.barrier)
        entry.runObserved(on: self, exclusive: entry.barrier)
        context.pop()
        finishConcurrent(barrier: entry.barrier)
    }

    /// An entry (or an inline sync) of this concurrent queue has finished.
    func finishConcurrent(barrier: Bool) {
        lock.lock()
        if barrier { state.barrierRunning = false } else { state.inFlight -= 1 }
        let start = pending.isEmpty ? .nothing : pumpLocked()
        let look = pending.isEmpty && ready.isEmpty && settleRingsLocked()
        lock.unlock()
        carryOut(start)
        if look { scheduleRingLook() }
    }
}
