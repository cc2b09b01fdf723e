// LevelRings: one JobRing of entries per run-queue level, made once and kept for the life of the
// pool (the process): the run queues' FIFOs and each staging shard's. Not thread-safe: guarded by
// the owner's lock (the pool's, a shard's).
struct LevelRings: @unchecked Sendable {
    /// Held as unmanaged references in memory of their own: reading a ring out of an array
    /// retained and released it on every push and pop (two atomic operations per job, callgrind).
    private let rings: UnsafeMutablePointer<Unmanaged<JobRing<DispatchEntry>>>

    init(capacity: Int) {
        rings = .allocate(capacity: RunQueues.levelCount)
        for level in 0..<RunQueues.levelCount { (rings + level).initialize(to: .passRetained(JobRing(capacity: capacity))) }
    }

    /// Runs `body` with level `level`'s ring, without retaining it.
    @inline(__always)
    func withRing<R>(_ level: Int, _ body: (JobRing<DispatchEntry>) -> R) -> R {
        rings[level]._withUnsafeGuaranteedRef(body)
    }
}
