// DispatchEntry: what a queue's ring and the pool's run queues hold (docs/DispatchPool.md,
// "Entries and jobs"). Immutable values, moved from ring to ring; whoever pops one runs it once.

/// The work an entry stands for.
enum DispatchWork {
    /// A submitted block (`async`).
    case block(@Sendable () -> Void)
    /// A submitted work item (`async(execute:)`): skipped if cancelled first.
    case item(TKDispatchWorkItem)
    /// A `sync` caller waiting for its turn: the drainer runs its block and releases it.
    case sync(SyncWaiter)
    /// The lane of a serial queue: drain a batch of it.
    case drain(TKDispatchQueue)
    /// A token of a concurrent queue: run the next entry of its ready ring.
    case runNext(TKDispatchQueue)
    /// A Swift concurrency job of the queue used as its executor (docs/Concurrency.md §2).
    case job(UnownedJob, TKDispatchQueue)
    /// A job of Swift concurrency's global executor, when the pool is installed as it.
    case globalJob(UnownedJob)
}

struct DispatchEntry {
    // Field order is layout: the group first, then the work (16 bytes and a tag byte), then the
    // barrier and the trace flow in the work's tail padding: 32 bytes a stride. In declaration
    // order work-first it was 40 (the group's 8 bytes aligned after the tag), and every staged,
    // queued and batched entry is moved through rings by the hundred thousand (asserted in
    // JobRingTests.testADispatchEntryIsThirtyTwoBytes).
    /// Left once the work has run (`async(group:)`). Unretained: the group holds a reference to
    /// itself while its count is above zero (`TKDispatchGroup.enter`), and the enter this entry
    /// owes its leave to keeps the count there until `run` leaves. (libdispatch's rule too: a
    /// retain and a release per item, two atomic read-modify-writes, saved.) So an entry with a
    /// group is never copied (its leave would run twice): it is moved, as every entry is.
    // safety: unretained, because the group keeps itself alive until the leave this entry owes.
    var group: Unmanaged<TKDispatchGroup>?
    var work: DispatchWork
    /// Runs alone on a concurrent queue, after everything submitted before it.
    var barrier: Bool
    /// The item's trace flow id when its submission was recorded, else 0 (in the work's padding
    /// with `barrier`; docs/DiagnosticsTrace.md).
    var traceFlow: UInt32 = 0

    init(_ work: DispatchWork, group: TKDispatchGroup? = nil, barrier: Bool = false) {
        self.work = work
        // safety: the caller entered the group, so its self-reference holds it (see `group`).
        self.group = group.map { Unmanaged.passUnretained($0) }
        self.barrier = barrier
    }

    /// Whether this entry is user work (as opposed to a lane or token, which push their own frame).
    var isUserWork: Bool {
        switch work {
        case .block, .item, .sync, .job, .globalJob: true
        case .drain, .runNext: false
        }
    }

    /// Runs the entry on the calling thread. The caller has pushed the frame of the queue the entry
    /// belongs to (for user work); lanes and tokens push their own.
    func run() {
        if traceFlow != 0 { TraceRecorder.dispatchItem(.begin, flow: traceFlow) }
        switch work {
        case .block(let block): block()
        case .item(let item): item.runFromQueue()
        case .sync(let waiter): waiter.runOnDrainer()
        case .drain(let queue): queue.drainLane()
        case .runNext(let queue): queue.runNextReady()
        case .job(let job, let queue): queue.runJob(job)
        case .globalJob(let job): TKConcurrency.runGlobal(job)
        }
        if traceFlow != 0 { TraceRecorder.dispatchItem(.end, flow: traceFlow) }
        // safety: the group's self-reference keeps it alive until this leave drops it, which is
        // why the release comes after the leave returns, outside the group's own method.
        if let group, group._withUnsafeGuaranteedRef({ $0.leaveReachingZero() }) { group.release() }
    }
}
