// InjectionStage: where every submission to the run queues from a thread that is not a worker of
// the job's tier arrives (docs/DispatchPool.md, "Submitting without the pool's lock"). A producer
// appends its job to its shard (chosen by its thread id, so a thread's jobs keep their order) and
// never touches the pool's lock on that path; whoever holds the pool's lock next moves every staged
// job into the run queues (flat combining: Hendler, Incze, Shavit and Tzafrir, "Flat Combining and
// the Synchronization-Parallelism Tradeoff", SPAA 2010; sharded per producer like Go's per-P run
// queues, so producers on different shards share no cache line). Any thread stages; only a holder
// of the pool's lock drains. A shard's rings are guarded by the shard's lock; `pending` holds the
// handshake flag of each tier (bit 0 normal, bit 1 background: a holder may drain one tier and
// leave the other's jobs to that tier's busy workers); `spares` and `drainedTiers` are guarded by
// the pool's lock. Buffers that a burst grew are given back once quiet (JobRing.settle): the
// drainer looks at every such buffer that passes through its hands, and `settleRings` at all of
// them once the pool has been idle.
import CThreadKit
import Synchronization

// safety: the shards are reached under their own locks or through atomics; `spares` and
// `drainedTiers` only under the pool's lock; `pending` and `stagedLevels` are atomic.
final class InjectionStage: @unchecked Sendable {
    /// One producer-side FIFO. A thread always stages into the same shard (chosen by its thread
    /// id), so its own jobs reach the run queues in the order it submitted them.
    // safety: every mutable field is reached under `lock` (the rings, `total`) or is atomic
    // (`hasJobs`); the rest is set in init and never written again.
    final class Shard: @unchecked Sendable {
        /// Alone on its cache line: producers on different shards never share the line they lock.
        let lock = DispatchLock.onItsOwnCacheLine()
        /// One FIFO per run-queue level (a thread's jobs keep their order within a level; across
        /// levels the run queues' QoS order decides anyway). Entries are moved in and out, never
        /// copied. Guarded by `lock`.
        let rings = LevelRings(capacity: 16)
        /// The fields a producer writes besides the lock's word and the rings, in a block of their
        /// own aligned to 128 bytes (a cache line and its adjacent-line prefetch pair), so two
        /// shards' flags never share a line wherever the allocator puts the shards themselves.
        struct Hot: ~Copyable {
            /// The tiers (`InjectionStage.tierBit`) whose rings hold a job. Written only under
            /// `lock` (so a read under it is exact) and only when it changes; the drainer reads it
            /// without the lock to skip a shard with nothing of the tiers it drains (sequentially
            /// consistent: see `drain`).
            let hasJobs = Atomic<UInt8>(0)
            /// Jobs ever staged here (for tests). Written only under `lock`, by a relaxed load and
            /// store (no read-modify-write). Atomic because a `+=` through `hot.pointee` would be
            /// a modifying access of the whole block, `hasJobs` included, which the drainer reads
            /// without the lock (ThreadSanitizer reports it as a Swift access race).
            let total = Atomic<Int>(0)
        }
        // safety: allocated (128-byte aligned, 128 bytes, `Hot` is 16) and initialized in init,
        // freed in deinit, which runs once no thread holds the shard (its stage released it);
        // both fields are atomic and reached only through read (borrowing) accesses of `pointee`.
        let hot: UnsafeMutablePointer<Hot>

        init() {
            assert(MemoryLayout<Hot>.size <= 128)
            // safety: 128 bytes at 128-byte alignment hold one `Hot`; freed in deinit.
            hot = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128).bindMemory(to: Hot.self, capacity: 1)
            hot.initialize(to: Hot())
        }

        deinit {
            hot.deinitialize(count: 1)
            hot.deallocate()
        }
    }

    /// Reached without retaining (a Swift array of classes retains on every read).
    // safety: `mask + 1` entries, each a +1 reference taken in init and released in deinit only;
    // indexed through `& mask` or `0...mask`, so never out of bounds.
    private let shards: UnsafeMutablePointer<Unmanaged<Shard>>
    private let mask: Int
    /// One flag per tier (`tierBit`): raised (sequentially consistent) by a producer after it
    /// staged a job of the tier, when it was not raised already; lowered by a drainer of the tier,
    /// under the pool's lock, before it looks at the shards. The handshake with the pool's lock
    /// (DispatchLock.tryLock / unlockSequentiallyConsistent) and with the tier's idle word makes
    /// sure that after every raise some thread takes the lock and drains the tier
    /// (docs/DispatchPool.md, "Staging"; Models/PoolWedge.pml).
    let pending = Atomic<UInt8>(0)
    /// The run-queue levels (a bit per level) of jobs staged since the last drain of their tier: a
    /// hint for busy workers, which hand their local batch back when another level is staged, so
    /// that a higher-QoS job does not wait for a long batch to end. Set by a producer after it
    /// staged (a load first: set already in a flood); cleared for the drained tiers' levels by a
    /// drainer before it looks at the shards, as `pending` is, so a job staged after a drain's
    /// look at its shard always leaves its bit set (sequentially consistent, the same argument as
    /// for `pending` in `drain`). A bit may be left set with nothing staged: a worker then visits
    /// the lock once for nothing.
    let stagedLevels = Atomic<UInt8>(0)
    typealias Tier = DispatchPool.Tier
    /// Both tiers' bits.
    static let allTiers = Tier.all
    /// The bit (`Tier.bit`) in `pending`, `Shard.hasJobs` and `drainedTiers` of the tier that
    /// runs a run-queue level.
    @inline(__always) static func tierBit(level: Int) -> UInt8 {
        Tier(level: level).bit
    }
    /// The run-queue levels of the tiers in `tiers`, as a bit per level.
    @inline(__always) static func levels(of tiers: UInt8) -> UInt8 {
        (tiers & Tier.normal.bit != 0 ? RunQueues.normalMask : 0)
            | (tiers & Tier.background.bit != 0 ? RunQueues.backgroundMask : 0)
    }
    /// The tiers a drain asked for `tiers` really takes: a drain of the background tier takes the
    /// normal tier too (see `drain`). The one place this widening is decided: `drain` applies it,
    /// and so does the pool's look at `pending` before it calls `drain`, so that look never
    /// skips a drain that `drain` would have made.
    @inline(__always) static func tiersToDrain(_ tiers: UInt8) -> UInt8 {
        tiers & Tier.background.bit != 0 ? allTiers : tiers
    }
    /// The drainer's rings, one per level, swapped with a shard's non-empty ones so the shard's lock
    /// is held only for the swaps. Guarded by the pool's lock.
    private let spares = LevelRings(capacity: 64)
    /// Tiers (`Tier.bit`) that received drained jobs since the pool's lock was
    /// taken, so its holder offers that work before unlocking. Guarded by the pool's lock.
    // safety: read and written only by the holder of the pool's lock, so accesses never overlap
    // and the runtime's exclusivity check (a cost on every drain) has nothing to catch.
    @exclusivity(unchecked) var drainedTiers: UInt8 = 0

    /// `width`: the pool's width. Shards: the next power of two at or above twice the width, at
    /// least 4 and at most 64, so producers rarely share one.
    init(width: Int) {
        var count = 4
        while count < 2 * width && count < 64 { count *= 2 }
        mask = count - 1
        // safety: `count` slots, each initialized here to a +1 reference; released in deinit.
        shards = .allocate(capacity: count)
        for i in 0..<count { (shards + i).initialize(to: Unmanaged.passRetained(Shard())) }
    }

    /// Runs once no thread can stage or drain any more (the last reference is gone).
    deinit {
        for i in 0...mask { shards[i].release() }
        shards.deinitialize(count: mask + 1)
        shards.deallocate()
    }

    /// Appends a job to the calling thread's shard. Returns true when this call raised its tier's
    /// `pending` flag: the caller must then try the pool's lock (and drain if it gets it), unless
    /// a busy worker of the tier will. False: the flag was up already, and the drain it promises
    /// will find this job (docs/DispatchPool.md, "Staging").
    func stage(_ entry: consuming DispatchEntry, level: Int) -> Bool {
        let shard = shards[Int(tk_current_tid()) & mask]
        let bit = Self.tierBit(level: level)
        // The slot is reserved under the lock and a guaranteed reference, then the entry is moved
        // into it (a consumed value cannot be moved inside the closure).
        // safety: the stage keeps every shard alive (+1 in `shards`) while `self` is; the slot
        // is reserved and initialized while this thread holds the shard's lock, so no drainer
        // sees it half-made.
        shard._withUnsafeGuaranteedRef { shard in
            shard.lock.lock()
            return shard.rings.withRing(level) { $0.reserveLast() }
        }.initialize(to: entry)
        // safety: the same shard, kept alive by the stage; its lock is still held.
        shard._withUnsafeGuaranteedRef { shard in
            shard.hot.pointee.total.store(shard.hot.pointee.total.load(ordering: .relaxed) + 1, ordering: .relaxed)
            let tiers = shard.hot.pointee.hasJobs.load(ordering: .relaxed)
            if tiers & bit == 0 { shard.hot.pointee.hasJobs.store(tiers | bit, ordering: .sequentiallyConsistent) }
            shard.lock.unlock()
        }
        let levelBit = UInt8(1) << level
        if stagedLevels.load(ordering: .sequentiallyConsistent) & levelBit == 0 {
            stagedLevels.bitwiseOr(levelBit, ordering: .sequentiallyConsistent)
        }
        // (Both tiers' flags share the word: raising one is a read-modify-write, so a drainer's
        // lowering of the other is never undone.)
        if pending.load(ordering: .sequentiallyConsistent) & bit != 0 { return false }
        pending.bitwiseOr(bit, ordering: .sequentiallyConsistent)
        return true
    }

    /// Jobs ever staged, over all shards (tests: the stress test checks the path was taken).
    var stagedSoFar: Int {
        (0...mask).reduce(0) { sum, i in
            // safety: kept alive by the stage (+1 in `shards`); `total` read under the shard's lock.
            sum + shards[i]._withUnsafeGuaranteedRef { shard in shard.lock.withLock { shard.hot.pointee.total.load(ordering: .relaxed) } }
        }
    }

    /// Moves every staged job of the tiers in `tiers` whose flag is raised into `runQueues`, each
    /// shard's in its order, and notes the tiers that received work in `drainedTiers`. Caller
    /// holds the pool's lock.
    ///
    /// Why a shard whose `hasJobs` reads without a tier's bit holds nothing of the tier this drain
    /// owes: every operation on `pending` and `hasJobs` is sequentially consistent, so they fall
    /// in one total order. A producer's `hasJobs` store (or the earlier one that left the bit set)
    /// comes before its look at `pending`; that look comes before the read-modify-write below that
    /// lowers the flag it saw (or raised); and that comes before the loads below, which therefore
    /// see the store — or a later clear, by a drainer that took the job.
    ///
    /// A drain of the background tier drains the normal tier too: background work must never
    /// reach the run queues ahead of normal work staged before it, because the admission rule
    /// (background waits while normal work waits, until it ages) reads the run queues. Without
    /// this, a background job staged behind 2,000 interactive ones (their workers busy, their
    /// flag left to them) was drained alone, found no normal work waiting and started at once
    /// (ci78, `DispatchPoolTests.testABackgroundItemBehindAnInteractiveFloodWaitsButIsNotStarvedForever`).
    /// A normal drain may leave background work staged: it only ever enters behind.
    func drain(_ tiers: UInt8, into runQueues: inout RunQueues) {
        let tiers = Self.tiersToDrain(tiers)
        let raised = pending.bitwiseAnd(~tiers, ordering: .sequentiallyConsistent).oldValue & tiers
        guard raised != 0 else { return }
        let wanted = Self.levels(of: raised)
        stagedLevels.bitwiseAnd(~wanted, ordering: .sequentiallyConsistent)
        // Read once, and only if a burst's buffer passes through (`settle`).
        var now: UInt64 = 0
        func stamp() -> UInt64 {
            if now == 0 { now = runQueues.clock() }
            return now
        }
        for i in 0...mask {
            // safety: kept alive by the stage (+1 in `shards`); the rings are touched under the
            // shard's lock, the spares under the pool's, which the caller holds.
            let levels = shards[i]._withUnsafeGuaranteedRef { shard -> UInt8 in
                guard shard.hot.pointee.hasJobs.load(ordering: .sequentiallyConsistent) & raised != 0 else { return 0 }
                shard.lock.lock()
                var levels: UInt8 = 0
                for level in 0..<RunQueues.levelCount where wanted & (1 << level) != 0 {
                    shard.rings.withRing(level) { ring in
                        guard !ring.isEmpty else { return }
                        levels |= 1 << level
                        spares.withRing(level) { ring.swapContents(with: $0) }
                        // The shard now has the spare's emptied buffer.
                        if ring.isOversized { ring.settle(now: stamp()) }
                    }
                }
                let left = shard.hot.pointee.hasJobs.load(ordering: .relaxed)
                shard.hot.pointee.hasJobs.store(left & ~raised, ordering: .sequentiallyConsistent)
                shard.lock.unlock()
                return levels
            }
            guard levels != 0 else { continue }
            if levels & RunQueues.backgroundMask != 0 { drainedTiers |= Tier.background.bit }
            if levels & RunQueues.normalMask != 0 { drainedTiers |= Tier.normal.bit }
            for level in 0..<RunQueues.levelCount where levels & (1 << level) != 0 {
                spares.withRing(level) { spare in
                    runQueues.append(contentsOf: spare, level: level)
                    // Emptied, holding its own buffer or the level's former one.
                    if spare.isOversized { spare.settle(now: stamp()) }
                }
            }
        }
    }

    /// Gives back every buffer of the stage (the spares', and each shard's under its lock) that
    /// held a burst and has been quiet since (`JobRing.settle`). Caller holds the pool's lock
    /// (which guards the spares and orders it before the shard locks, as in `drain`).
    func settleRings(now: UInt64) {
        for level in 0..<RunQueues.levelCount { spares.withRing(level) { _ = $0.settle(now: now) } }
        for i in 0...mask {
            // safety: kept alive by the stage (+1 in `shards`); its rings touched under its lock.
            shards[i]._withUnsafeGuaranteedRef { shard in
                shard.lock.lock()
                for level in 0..<RunQueues.levelCount { shard.rings.withRing(level) { _ = $0.settle(now: now) } }
                shard.lock.unlock()
            }
        }
    }
}
