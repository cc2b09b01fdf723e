// IdleWord: one tier's idle word and idle stack (docs/DispatchPool.md, "The idle word";
// Models/PoolIdleWord.pml). The word packs the three counters a wake decides on — searching,
// running, idle — into one atomic, changed by one read-modify-write at each transition, so that a
// producer can decide and claim a wake without the pool's lock (tokio's `idle.rs` packs its
// searching and unparked counts the same way). The idle stack is guarded by `lock`, a leaf (nothing
// is taken while it is held; the pool's lock may be held around it).
//
// Who touches what:
// - `word`: any thread. Read-modify-writes by holders of the pool's lock (the scheduler's
//   transitions) and, for a claim, by holders of `lock` (a producer, without the pool's lock). All
//   sequentially consistent: the producer's load after raising the stage's flag pairs with the
//   read-modify-write of a worker going idle, or of a searcher that found a job (the Dekker pair
//   in `DispatchPool.submitShared`).
// - `top` and the workers' `isIdle` and `nextIdle` links: only under `lock`, and every change of
//   the stack changes the word's idle count in the same section, so the stack holds exactly that
//   many workers whenever `lock` is free.
// - Pushes, and removals other than claims, happen only under the pool's lock too: while a holder
//   of the pool's lock looks, the idle count can only fall, and only by a claim (which also raises
//   `searching`).
import Synchronization

/// The counters of one tier's idle word, unpacked.
struct IdleCounts: Equatable {
    /// Workers woken or started that have not found a job yet (`PoolScheduler.TierState.searching`).
    var searching: Int
    /// Workers executing or about to execute a job (`PoolScheduler.TierState.running`).
    var running: Int
    /// Workers on the idle stack.
    var idle: Int

    /// The claim's condition (the decision of `IdleWord.claim`, checked again under `lock`): nobody
    /// searches (a searcher wakes the next one when it finds a job, so one wake per idle→busy
    /// step), the tier may admit a worker more, and one is idle.
    func mayClaim(width: Int) -> Bool { searching == 0 && running < width && idle > 0 }
}

// safety: `word` is atomic; `top` and the stack's links are touched only under `lock` (the
// `…Locked` functions assert it); `lock` is its own owner.
final class IdleWord<Worker: PoolSchedulerWorker>: @unchecked Sendable {
    /// searching in bits 0–15, running in 16–31, idle in 32–47. Every field stays within 0...65535
    /// (threads per tier are capped at 4,096), so a change of several fields is one wrapping add
    /// of their signed deltas.
    private let word = Atomic<UInt64>(0)
    /// Guards the idle stack. A leaf.
    let lock = DispatchLock()
    /// The idle stack's top: the most recently idle worker (woken first: its cache is warm). An
    /// intrusive list through the workers' `nextIdle` (Go's idle Ms are linked the same way,
    /// through `schedlink`), so a wake touches this object and the worker it wakes and no buffer.
    /// Guarded by `lock`.
    // safety: only under `lock`, so accesses never overlap.
    @exclusivity(unchecked) private var topLocked: Worker?

    static func pack(_ counts: IdleCounts) -> UInt64 {
        UInt64(counts.searching) | UInt64(counts.running) << 16 | UInt64(counts.idle) << 32
    }

    static func unpack(_ word: UInt64) -> IdleCounts {
        IdleCounts(
            searching: Int(word & 0xFFFF), running: Int(word >> 16 & 0xFFFF), idle: Int(word >> 32 & 0xFFFF))
    }

    /// The counters now: one sequentially consistent load, so the three are consistent with each
    /// other.
    @inline(__always)
    var counts: IdleCounts { Self.unpack(word.load(ordering: .sequentiallyConsistent)) }

    /// Changes the counters by these deltas in one sequentially consistent read-modify-write and
    /// returns the counters after it.
    @inline(__always)
    @discardableResult
    func add(searching: Int = 0, running: Int = 0, idle: Int = 0) -> IdleCounts {
        let delta = Int64(searching) &+ Int64(running) &<< 16 &+ Int64(idle) &<< 32
        let old = word.wrappingAdd(UInt64(bitPattern: delta), ordering: .sequentiallyConsistent).oldValue
        let new = Self.unpack(old &+ UInt64(bitPattern: delta))
        assert(
            new.searching >= 0 && new.running >= 0 && new.idle >= 0 && Self.pack(new) == old &+ UInt64(bitPattern: delta),
            "IdleWord: a counter left its field: \(Self.unpack(old)) + (\(searching), \(running), \(idle))")
        return new
    }

    /// What a claim found.
    enum Claim {
        /// Off the stack, counted running and searching: set its event.
        case claimed(Worker)
        /// Somebody searches, or `width` run: nobody is to be woken.
        case busy
        /// The tier could take a worker but none is idle: a thread must start (under the pool's
        /// lock).
        case noneIdle
    }

    /// A wake without the pool's lock (also made under it): under `lock`, looks at the word again
    /// and, if `IdleCounts.mayClaim` still holds, moves one worker from idle to running and
    /// searching in one read-modify-write and pops it. Any thread.
    func claim(width: Int) -> Claim {
        lock.lock()
        defer { lock.unlock() }
        return claimLocked(width: width)
    }

    private func claimLocked(width: Int) -> Claim {
        lock.assertHeld("IdleWord.lock")
        let now = counts
        guard now.searching == 0 && now.running < width else { return .busy }
        guard now.idle > 0 else { return .noneIdle }
        add(searching: 1, running: 1, idle: -1)
        guard let worker = popLocked() else {
            preconditionFailure("IdleWord: the word counts \(now.idle) idle workers and the stack is empty")
        }
        return .claimed(worker)
    }

    /// `claim` for a producer: nil, deciding nothing, when `lock` is busy (the producer then takes
    /// the old way, `tryLock` on the pool's lock: every other holder of `lock` holds that one and
    /// sees the stage's flag when it unlocks, or is a claimer making a searcher). A producer never
    /// sleeps on `lock`. Any thread.
    func tryClaim(width: Int) -> Claim? {
        guard lock.tryLock() else { return nil }
        defer { lock.unlock() }
        return claimLocked(width: width)
    }

    /// A worker with no job goes on the stack: pushed, and moved from running (and searching) to
    /// idle in one read-modify-write. Its event must be reset before this (a claimer may set it as
    /// soon as `lock` is released). Caller holds the pool's lock.
    func park(_ worker: Worker, wasSearching: Bool) {
        lock.lock()
        defer { lock.unlock() }
        pushLocked(worker)
        add(searching: wasSearching ? -1 : 0, running: -1, idle: 1)
    }

    /// The worker most recently pushed, or nil.
    var top: Worker? { lock.withLock { topLocked } }

    /// The stack from top to bottom (tests, the invariant check, the state dump).
    var workers: [Worker] { lock.withLock { workersLocked } }

    /// As `workers`. Caller holds `lock`.
    var workersLocked: [Worker] {
        lock.assertHeld("IdleWord.lock")
        var list: [Worker] = []
        var next = topLocked
        while let worker = next {
            list.append(worker)
            next = worker.nextIdle
        }
        return list
    }

    /// The stack's operations are the only writers of `isIdle`, so "on the stack iff `isIdle`"
    /// holds by construction; pushing a worker that is on it already (whose `nextIdle` may be nil
    /// at the bottom) would make a cycle, hence the assertion. Caller holds `lock` and changes the
    /// word's idle count in the same section.
    private func pushLocked(_ worker: Worker) {
        lock.assertHeld("IdleWord.lock")
        assert(!worker.isIdle && worker.nextIdle == nil, "IdleWord: a worker pushed on the idle stack twice")
        worker.nextIdle = topLocked
        worker.isIdle = true
        topLocked = worker
    }

    private func popLocked() -> Worker? {
        lock.assertHeld("IdleWord.lock")
        guard let worker = topLocked else { return nil }
        topLocked = worker.nextIdle
        worker.nextIdle = nil
        worker.isIdle = false
        return worker
    }

    /// Unlinks `worker` wherever it is on the stack (an idle worker retiring, or admitting itself
    /// to aged background work: rare, and the stack is short) and counts it out of idle and, with
    /// `running`, into running. Caller holds `lock` (and the pool's lock); `worker` is idle.
    func removeLocked(_ worker: Worker, running: Int = 0) {
        lock.assertHeld("IdleWord.lock")
        assert(worker.isIdle, "IdleWord: removeLocked of a worker that is not on the idle stack")
        defer { add(running: running, idle: -1) }
        if topLocked === worker {
            _ = popLocked()
            return
        }
        var above = topLocked
        while let current = above {
            if current.nextIdle === worker {
                current.nextIdle = worker.nextIdle
                worker.nextIdle = nil
                worker.isIdle = false
                return
            }
            above = current.nextIdle
        }
        assertionFailure("IdleWord: a worker marked idle is not on the idle stack")
    }
}
