// HangWatchdog: hang reports (docs/Diagnostics.md §2). Run-loop passes, dispatch work items and
// operations mark their start and end on their thread's HangSlot (`begin`/`end`, behind
// `DiagnosticsSwitch.isOn(.hangs)`); one watchdog thread wakes every quarter threshold, and when a
// slot's activity has run past the threshold it samples that thread's stack by signalling it
// (CThreadKitLockOrder.h: a real-time signal whose handler calls backtrace()), then reports the
// thread, the activity, how long it has run and the symbolized frames, once per activity.
//
// Threads: a slot's activity and start are written by its own thread and read by the watchdog,
// under the slot's `mutex` (a leaf). `slots` and the watchdog's state are guarded by `mutex` of
// HangWatchdog.shared (a leaf; never held while a slot's mutex is taken... except to list slots,
// which takes no slot mutex). Reports are delivered on the watchdog thread, with no lock held.
import CThreadKit
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

/// One thread's current activity. Owned by its thread (through a thread-local); listed by the
/// watchdog until the thread exits.
final class HangSlot: @unchecked Sendable {
    let tid: UInt32
    private let mutex = RawMutex()
    private var mark = HangMark(activity: nil, started: 0)   // guarded by mutex
    /// The start of the last activity reported. Watchdog threads only (an old one finishing its
    /// last scan may overlap a new one): the exchange makes one of them report it. Relaxed: only
    /// this word is involved.
    let reportedStart = Atomic<UInt64>(0)

    init(tid: UInt32) { self.tid = tid }
    deinit { mutex.deallocate() }

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

final class HangWatchdog: @unchecked Sendable {
    static let shared = HangWatchdog()

    /// The calling thread's slot; the destructor unlists it when the thread exits.
    private static let local = TKThreadLocal<HangSlot>(destructor: { HangWatchdog.shared.unlist($0) })

    private let mutex = RawMutex()
    private var slots: [ObjectIdentifier: HangSlot] = [:]   // guarded by mutex
    private var running = false                              // guarded by mutex: a watchdog thread should run
    /// Which watchdog thread is the current one (guarded by mutex): a thread told to stop that has
    /// not yet seen it exits when a newer one has started, so two never scan at once.
    private var generation = 0
    private var threshold = DiagnosticsConfiguration.fromEnvironment.hangThreshold // guarded by mutex
    /// Bumped to wake the watchdog (threshold changed, stopped); it parks on it between scans.
    private let wakeWord = FutexWord(0)

    // MARK: Hooks (any thread)

    /// The calling thread starts `activity`; pass the result to `end`.
    @inline(never)
    static func begin(_ activity: HangActivity) -> HangMark {
        let slot = local.value ?? shared.list()
        return slot.replace(activity, at: Contention.now())
    }

    /// The activity begun by the matching `begin` is over; the one before it (if any) resumes.
    @inline(never)
    static func end(_ previous: HangMark) {
        local.value?.restore(previous)
    }

    private func list() -> HangSlot {
        let slot = HangSlot(tid: SystemCall.currentThreadID)
        HangWatchdog.local.value = slot
        mutex.withLock { slots[ObjectIdentifier(slot)] = slot }
        startIfNeeded()
        return slot
    }

    private func unlist(_ slot: HangSlot) {
        mutex.withLock { slots[ObjectIdentifier(slot)] = nil }
    }

    // MARK: The watchdog thread

    var currentThreshold: Duration {
        get { mutex.withLock { threshold } }
        set {
            mutex.withLock { threshold = newValue }
            wake()
        }
    }

    /// Starts the watchdog thread unless one runs.
    func startIfNeeded() {
        let start: Int? = mutex.withLock {
            if running { return nil }
            running = true
            generation += 1
            return generation
        }
        guard let start else { return }
        _ = tk_hang_sampler_install()
        let thread = TKThread(name: "tk.hang-watchdog") { HangWatchdog.shared.watch(start) }
        thread.start()
    }

    /// Asks the watchdog thread to exit (hang reports were switched off).
    func stop() {
        mutex.withLock { running = false }
        wake()
    }

    private func wake() {
        wakeWord.pointer.pointee.wrappingAdd(1, ordering: .relaxed)
        Parking.unparkAll(wakeWord)
    }

    private func watch(_ mine: Int) {
        while true {
            let seen = wakeWord.pointer.pointee.load(ordering: .relaxed)
            let tid = mutex.lockInternal()
            let keepRunning = running && generation == mine, limit = threshold, listed = Array(slots.values)
            mutex.unlockInternal(tid)
            guard keepRunning else { return }
            let now = Contention.now()
            let limitNs = UInt64(limit.components.seconds) * 1_000_000_000 + UInt64(limit.components.attoseconds / 1_000_000_000)
            for slot in listed {
                let mark = slot.current
                let started = mark.started
                guard let activity = mark.activity, started != 0, now &- started >= limitNs,
                      slot.reportedStart.exchange(started, ordering: .relaxed) != started else { continue }
                let report = sample(slot, activity: activity, running: .nanoseconds(Int64(now &- started)))
                TKDiagnostics.deliver(report)
            }
            // A quarter threshold between scans: a hang is seen within 1.25 thresholds (plus sampling).
            let pause = max(limit / 4, .milliseconds(2))
            _ = Parking.park(wakeWord, expected: seen, deadline: .now + pause)
        }
    }

    /// Signals the slot's thread for its stack and waits up to 500 ms for the handler.
    private func sample(_ slot: HangSlot, activity: HangActivity, running: Duration) -> TKHangReport {
        let done = FutexWord(0)
        defer { done.deallocate() }
        var frames: [UInt] = []
        if tk_hang_sample_request(slot.tid, done.address) == 0 {
            let deadline = ContinuousClock.now + .milliseconds(500)
            while done.pointer.pointee.load(ordering: .acquiring) == 0 {
                if !Parking.park(done, expected: 0, deadline: deadline) { break }
            }
            tk_hang_sample_cancel()
            let count = Int(done.pointer.pointee.load(ordering: .acquiring))
            if count > 0, let buffer = tk_hang_sample_frames() {
                // Skip the handler's own frame and the signal trampoline.
                frames = (min(2, count - 1)..<(count - 1)).map { UInt(bitPattern: buffer[$0]) }
            }
        }
        let thread = LockOrderThread(tid: slot.tid, name: LockOrderThread.name(of: slot.tid))
        return TKHangReport(thread: thread.description, threadID: slot.tid, activity: activity.description,
                            duration: running, addresses: frames)
    }
}

/// A hang: an activity that ran past the threshold, with its thread's stack as sampled then.
public struct TKHangReport: Sendable, CustomStringConvertible {
    /// `thread TID "name"`.
    public let thread: String
    /// The kernel thread id of the stuck thread.
    public let threadID: UInt32
    /// What it was doing: `a work item of queue "label"`, `a run-loop pass in mode default`, …
    public let activity: String
    /// How long the activity had run when it was sampled.
    public let duration: Duration
    let addresses: [UInt]

    /// The stuck thread's call stack, innermost first (empty if the thread could not be sampled).
    public var callStack: [String] { LockOrderStack.symbolize(addresses, dropLeadingThreadKitFrames: false) }

    public var description: String {
        var text = "ThreadKit hang: \(thread) has been running \(activity) for \(TKContentionCounters.format(duration)):\n"
        for frame in callStack { text += "      \(frame)\n" }
        return text + "  Fix: move long or blocking work off this thread, or split it into shorter items."
    }
}
