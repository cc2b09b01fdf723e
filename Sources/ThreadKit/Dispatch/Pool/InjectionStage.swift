// InjectionStage: where every submission to the run queues from a thread that is not a worker of
// the job's tier arrives (docs/DispatchPool.md, "Submitting without the pool's lock"). A producer
// appends its job to its shard (chosen by its thread id, so a thread's jobs keep their order) and
// never touches the pool's lock on that path; whoever holds the pool's lock next moves every staged
// job into the run queues (flat combining: Hendler, Incze, Shavit and Tzafrir, "Flat Combining and
// the Synchronization-Parallelism Tradeoff", SPAA 2010; sharded per producer like Go's per-P run
// queues, so producers on different shards share no cache line). Any thread stages; only a holder
// of the pool's lock drains. A shard's rings are guarded by the shard's lock; `pending` is the
// handshake flag; `spares` and `drainedTiers` are guarded by the pool's lock.
import CThreadKit
import Synchronization

final class InjectionStage: @unchecked Sendable {
    /// One producer-side FIFO. A thread always stages into the same shard (chosen by its thread
    /// id), so its own jobs reach the run queues in the order it submitted them.
    final class Shard: @unchecked Sendable {
        /// Alone on its cache line: producers on different shards never share the line they lock.
        let lock = DispatchLock.onItsOwnCacheLine()
        /// One FIFO per run-queue level (a thread's jobs keep their order within a level; across
        /// levels the run queues' QoS order decides anyway). Entries are moved in and out, never
        /// copied. Guarded by `lock`.
        let rings = LevelRings(capacity: 16)
        /// Jobs ever staged here (for tests), guarded by `lock`.
        @exclusivity(unchecked) var total = 0
        /// Whether any of `rings` holds a job. Written only under `lock` (so a read under it is
        /// exact) and only when it changes; the drainer reads it without the lock to skip an empty
        /// shard (sequentially consistent: see `drain`).
        let hasJobs = Atomic<Bool>(false)
        /// Keeps the next shard's allocations off this shard's ring header.
        private let padding = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 64)
    }

    /// Reached without retaining (a Swift array of classes retains on every read).
    private let shards: UnsafeMutablePointer<Unmanaged<Shard>>
    private let mask: Int
    /// Raised (sequentially consistent) by a producer after it staged a job, when it was not raised
    /// already; lowered by the drainer, under the pool's lock, before it looks at the shards. The
    /// handshake with the pool's lock (DispatchLock.tryLock / unlockSequentiallyConsistent) makes
    /// sure that after every raise some thread takes the lock and drains.
    let pending = Atomic<Bool>(false)
    /// The drainer's rings, one per level, swapped with a shard's non-empty ones so the shard's lock
    /// is held only for the swaps. Guarded by the pool's lock.
    private let spares = LevelRings(capacity: 64)
    /// Tiers (bit 0 normal, bit 1 background) that received drained jobs since the pool's lock was
    /// taken, so its holder offers that work before unlocking. Guarded by the pool's lock.
    @exclusivity(unchecked) var drainedTiers: UInt8 = 0

    /// `width`: the pool's width. Shards: the next power of two at or above twice the width, at
    /// least 4 and at most 64, so producers rarely share one.
    init(width: Int) {
        var count = 4
        while count < 2 * width && count < 64 { count *= 2 }
        mask = count - 1
        shards = .allocate(capacity: count)
        for i in 0..<count { (shards + i).initialize(to: Unmanaged.passRetained(Shard())) }
    }

    /// Appends a job to the calling thread's shard. Returns true when this call raised `pending`:
    /// the caller must then try the pool's lock (and drain if it gets it). False: `pending` was up
    /// already, and the drain it promises will find this job (docs/DispatchPool.md, "Staging").
    func stage(_ entry: consuming DispatchEntry, level: Int) -> Bool {
        let shard = shards[Int(tk_current_tid()) & mask]
        // The slot is reserved under the lock and a guaranteed reference, then the entry is moved
        // into it (a consumed value cannot be moved inside the closure).
        shard._withUnsafeGuaranteedRef { shard in
            shard.lock.lock()
            return shard.rings.withRing(level) { $0.reserveLast() }
        }.initialize(to: entry)
        shard._withUnsafeGuaranteedRef { shard in
            shard.total += 1
            if !shard.hasJobs.load(ordering: .relaxed) { shard.hasJobs.store(true, ordering: .sequentiallyConsistent) }
            shard.lock.unlock()
        }
        if pending.load(ordering: .sequentiallyConsistent) { return false }
        pending.store(true, ordering: .sequentiallyConsistent)
        return true
    }

    /// Jobs ever staged, over all shards (tests: the stress test checks the path was taken).
    var stagedSoFar: Int {
        (0...mask).reduce(0) { sum, i in
            sum + shards[i]._withUnsafeGuaranteedRef { shard in shard.lock.withLock { shard.total } }
        }
    }

    /// Moves every staged job into `runQueues`, each shard's in its order, and notes the tiers that
    /// received work in `drainedTiers`. Caller holds the pool's lock.
    ///
    /// Why a shard whose `hasJobs` reads false holds nothing this drain owes: every operation on
    /// `pending` and `hasJobs` is sequentially consistent, so they fall in one total order. A
    /// producer's `hasJobs` store (or the earlier one that left it set) comes before its look at
    /// `pending`; that look comes before the exchange below that lowers the flag it saw (or raised);
    /// and the exchange comes before the loads below, which therefore see the store — or a later
    /// clear, by a drainer that took the job.
    func drain(into runQueues: inout RunQueues) {
        guard pending.exchange(false, ordering: .sequentiallyConsistent) else { return }
        for i in 0...mask {
            let levels = shards[i]._withUnsafeGuaranteedRef { shard -> UInt8 in
                guard shard.hasJobs.load(ordering: .sequentiallyConsistent) else { return 0 }
                shard.lock.lock()
                var levels: UInt8 = 0
                for level in 0..<RunQueues.levelCount {
                    shard.rings.withRing(level) { ring in
                        guard !ring.isEmpty else { return }
                        levels |= 1 << level
                        spares.withRing(level) { ring.swapContents(with: $0) }
                    }
                }
                shard.hasJobs.store(false, ordering: .sequentiallyConsistent)
                shard.lock.unlock()
                return levels
            }
            guard levels != 0 else { continue }
            if levels & 1 != 0 { drainedTiers |= 2 }
            if levels & RunQueues.normalMask != 0 { drainedTiers |= 1 }
            for level in 0..<RunQueues.levelCount where levels & (1 << level) != 0 {
                spares.withRing(level) { runQueues.append(contentsOf: $0, level: level) }
            }
        }
    }
}
