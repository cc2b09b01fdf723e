// BarrierEpochs: how a queue's barrier blocks order its operations (docs/Operations.md,
// "Barriers"). Not thread-safe: guarded by the owning TKOperationQueue's lock.
//
// Barriers cut the stream of added operations into epochs: epoch k holds the operations added
// after the k-th barrier and before the next, and ends with that next barrier. Only operations of
// the first open epoch may start; one of a later epoch that becomes ready meanwhile is held back.
// The barrier that closes the first epoch is released (to the front of the ready list) once every
// operation of that epoch has finished; when the barrier finishes, the next epoch opens and its
// held operations become ready in the order they became ready. With no barrier there is one epoch
// and every call below is a couple of loads and stores.

struct BarrierEpochs {
    private struct Epoch {
        /// Operations of this epoch added and not finished (the barrier not counted).
        var unfinished = 0
        /// Ready operations of this (not yet open) epoch, in the order they became ready.
        var held: [TKOperation] = []
        /// The barrier that closes this epoch, and whether it went to the ready list already.
        var barrier: TKOperation?
        var barrierReleased = false
    }

    /// Never empty. `epochs[0]` is the open epoch; the last one takes newly added operations.
    private var epochs = [Epoch()]
    /// The number of `epochs[0]` (operations keep the number of their epoch in `epoch`).
    private var first: UInt64 = 0

    mutating func add(_ operation: TKOperation) {
        operation.epoch = first + UInt64(epochs.count - 1)
        epochs[epochs.count - 1].unfinished += 1
    }

    /// `barrier` closes the newest epoch; operations added from now on belong to a new one.
    mutating func addBarrier(_ barrier: TKOperation) {
        barrier.epoch = first + UInt64(epochs.count - 1)
        epochs[epochs.count - 1].barrier = barrier
        epochs.append(Epoch())
    }

    /// Whether a ready operation may go to the ready list now; if not, it is held for its epoch.
    mutating func admit(_ operation: TKOperation) -> Bool {
        let index = Int(operation.epoch - first)
        if index == 0 { return true }
        epochs[index].held.append(operation)
        return false
    }

    /// An operation of the open epoch (or its barrier) finished.
    mutating func finished(_ operation: TKOperation, into ready: inout ReadyQueue) {
        if operation.isBarrier {
            assert(epochs[0].barrier === operation, "only the open epoch's barrier can run")
            epochs.removeFirst()
            first += 1
            for held in epochs[0].held { ready.push(held, level: ReadyQueue.level(held.queuePriority)) }
            epochs[0].held = []
        } else {
            assert(operation.epoch == first, "only operations of the open epoch can run")
            epochs[0].unfinished -= 1
        }
        releaseBarrierIfDue(into: &ready)
    }

    /// Moves the open epoch's barrier to the front of the ready list once its epoch has drained.
    mutating func releaseBarrierIfDue(into ready: inout ReadyQueue) {
        guard epochs[0].unfinished == 0, let barrier = epochs[0].barrier, !epochs[0].barrierReleased else { return }
        epochs[0].barrierReleased = true
        ready.push(barrier, level: ReadyQueue.highest)
    }
}
