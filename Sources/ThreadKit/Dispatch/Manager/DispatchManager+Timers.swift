// DispatchManager+Timers: asyncAfter and timer sources on the manager's one heap (keyed by
// (deadline, sequence); its values are slots of `timerTargets`). Scheduling from any thread under
// `lock`; popping what is due (under `lock`, the clock read inside it so nothing fires early) and
// firing (with no lock held) on the manager thread only. The timerfd is armed by the loop
// (DispatchManager.swift), only when the earliest deadline moved.
extension DispatchManager {
    enum TimerTarget {
        case block(@Sendable () -> Void)
        case source(TKDispatchSource, generation: UInt64)
    }

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

    /// Takes the targets due at `now` off the heap and frees their slots. Caller holds lock;
    /// manager thread.
    func popDueLocked(_ now: ContinuousClock.Instant) -> [TimerTarget] {
        lock.assertHeld("DispatchManager.lock")
        return heap.popDue(now).map { entry -> TimerTarget in
            let target = timerTargets[entry.payload]!
            timerTargets[entry.payload] = nil
            freeTimerSlots.append(entry.payload)
            return target
        }
    }

    /// Manager thread, no lock held.
    func fire(_ target: TimerTarget) {
        switch target {
        case .block(let block): block()
        case .source(let source, let generation): source.timerFired(generation: generation)
        }
    }
}
