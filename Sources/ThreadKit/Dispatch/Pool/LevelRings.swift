// LevelRings: one JobRing of entries per run-queue level: the run queues' FIFOs and each staging
// shard's. It owns its rings: made with its owner (the scheduler's run queues, a shard, the
// stage's spares) and released in its deinit. Not thread-safe: guarded by the owner's lock (the
// pool's, a shard's).
struct LevelRings: ~Copyable {
    /// Held as unmanaged references in memory of their own: reading a ring out of an array
    /// retained and released it on every push and pop (two atomic operations per job, callgrind).
    // safety: allocated and initialized in init, released and freed only in deinit; a ~Copyable
    // value has one owner, so no copy can outlive the memory or free it twice.
    private let rings: UnsafeMutablePointer<Unmanaged<JobRing<DispatchEntry>>>

    init(capacity: Int) {
        // safety: one slot per level, each initialized here to a +1 reference; freed in deinit.
        rings = .allocate(capacity: RunQueues.levelCount)
        for level in 0..<RunQueues.levelCount { (rings + level).initialize(to: .passRetained(JobRing(capacity: capacity))) }
    }

    deinit {
        for level in 0..<RunQueues.levelCount { rings[level].release() }
        rings.deinitialize(count: RunQueues.levelCount)
        rings.deallocate()
    }

    /// Runs `body` with level `level`'s ring, without retaining it.
    @inline(__always)
    func withRing<R>(_ level: Int, _ body: (JobRing<DispatchEntry>) -> R) -> R {
        // safety: `rings` holds a +1 reference per level until deinit, and this borrow of self
        // keeps deinit from running while `body` uses the ring.
        rings[level]._withUnsafeGuaranteedRef(body)
    }
}
