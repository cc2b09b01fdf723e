// HangSlot: one thread's current activity for the hang watchdog (docs/Diagnostics.md §2). The
// slot's activity and start are written by its own thread (`replace`, `restore`) and read by the
// watchdog thread (`current`), under the slot's `mutex` (a leaf). `reportedStart` belongs to the
// watchdog threads.
import Synchronization

/// What a thread is doing, for the report.
enum HangActivity: Sendable {
    case runLoopPass(mode: String)
    case queueItem(label: String)
    case operation(String)

    var description: String {
        switch self {
        case .runLoopPass(let mode): "a run-loop pass in mode \(mode)"
        case .queueItem(let label): "a work item of queue \"\(label)\""
        case .operation(let name): "operation \(name)"
        }
    }
}

/// An activity and when it started (CLOCK_MONOTONIC ns; 0: none).
struct HangMark: Sendable {
    var activity: HangActivity?
    var started: UInt64
}

// safety: `mark` only under `mutex`; `reportedStart` is atomic; `tid` is immutable.
/// One thread's current activity. Owned by its thread (through a thread-local); listed by the
/// watchdog until the thread exits.
final class HangSlot: @unchecked Sendable {
    let tid: UInt32
    private let mutex = RawMutex()
    private var mark = HangMark(activity: nil, started: 0) // guarded by mutex
    /// The start of the last activity reported. Watchdog threads only (an old one finishing its
    /// last scan may overlap a new one): the exchange makes one of them report it. Relaxed: only
    /// this word is involved.
    let reportedStart = Atomic<UInt64>(0)

    init(tid: UInt32) { self.tid = tid }

    /// Sets the current activity and returns the one it replaces (restored by `restore`).
    func replace(_ new: HangActivity, at time: UInt64) -> HangMark {
        let tid = mutex.lockInternal()
        let previous = mark
        mark = HangMark(activity: new, started: time)
        mutex.unlockInternal(tid)
        return previous
    }

    func restore(_ previous: HangMark) {
        let tid = mutex.lockInternal()
        mark = previous
        mutex.unlockInternal(tid)
    }

    var current: HangMark {
        let tid = mutex.lockInternal()
        defer { mutex.unlockInternal(tid) }
        return mark
    }
}
