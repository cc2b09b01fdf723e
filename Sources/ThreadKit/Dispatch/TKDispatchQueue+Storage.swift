// TKDispatchQueue+Storage: how a custom queue gives back the ring buffers a burst grew (issue 49):
// 10^7 blocks submitted to a suspended serial queue leave `pending` and, after the drain, `batch`
// with buffers of 2^24 entries (512 MiB of address space, as deep as the burst reached touched).
// The rule is JobRing.settle's: a buffer above `JobRing.retainedCapacity` goes once its size has
// gone unneeded for `JobRing.quietNanoseconds`. The queue looks when a serial lane goes idle or a
// concurrent queue empties, and, while a burst's buffer remains, once more a quiet period later on
// the manager thread (DispatchManager's timer heap, the queue held weakly). A serial lane goes idle
// in `drainLane` or when a `sync` caller that owned it leaves (`leaveOne`). Everything here runs
// under `lock`, except scheduling the look (after unlocking). `batch` is looked at only while no
// drainer holds it (`state.lane != .draining`).

extension TKDispatchQueue {
    /// Settles the queue's rings that may hold a burst's buffer: `pending` always; a serial lane's
    /// `batch` while no drainer holds it; a concurrent queue's `ready`. Returns true when a buffer
    /// remains that a later look may give back and none is scheduled yet: the caller then calls
    /// `scheduleRingLook` after unlocking. Caller holds lock.
    func settleRingsLocked() -> Bool {
        lock.assertHeld("TKDispatchQueue.lock")
        let other: JobRing<DispatchEntry>?
        switch kind {
        case .root: return false
        case .serial, .main: other = state.lane == .draining ? nil : batch
        case .concurrent: other = ready
        }
        guard pending.isOversized || other?.isOversized == true else { return false }
        let now = RunQueues.stamp()
        pending.settle(now: now)
        other?.settle(now: now)
        guard pending.isOversized || other?.isOversized == true, !state.ringLookScheduled else { return false }
        state.ringLookScheduled = true
        return true
    }

    /// Looks at the rings again one quiet period (and a little) from now, on the manager thread.
    func scheduleRingLook() {
        let quiet = Duration.nanoseconds(Int64(JobRing<DispatchEntry>.quietNanoseconds)) + .milliseconds(10)
        DispatchManager.shared.schedule(at: .now + quiet) { [weak self] in self?.ringLookDue() }
    }

    /// The scheduled look: settles again, and schedules another while a burst's buffer remains (a
    /// flood keeps its buffers and is looked at once per quiet period).
    private func ringLookDue() {
        lock.lock()
        state.ringLookScheduled = false
        let again = settleRingsLocked()
        lock.unlock()
        if again { scheduleRingLook() }
    }

    /// The capacities of `pending` and of `batch` (nil while a drainer holds it), for tests.
    var ringCapacities: (pending: Int, batch: Int?) {
        lock.withLock { (pending.currentCapacity, state.lane == .draining ? nil : batch.currentCapacity) }
    }
}
