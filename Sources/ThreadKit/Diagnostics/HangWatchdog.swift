// HangWatchdog: hang reports (docs/Diagnostics.md §2). Run-loop passes, dispatch work items and
// operations mark their start and end on their thread's HangSlot (`begin`/`end`, behind
// `DiagnosticsSwitch.isOn(.hangs)`); one watchdog thread wakes every quarter threshold, and when a
// slot's activity has run past the threshold it samples that thread's stack by signalling it
// (CThreadKitLockOrder.h: a real-time signal whose handler calls backtrace()), then reports the
// thread, the activity, how long it has run and the symbolized frames, once per activity.
//
// Threads: `slots`, `running`, `generation` and `threshold` are guarded by `mutex` (a leaf: no
// slot's mutex is taken under it). Slots are described in HangSlot.swift. Reports are sampled,
// symbolized and delivered on the watchdog thread with no lock held.
import CThreadKit
import Synchronization

// safety: the slot table and the thread's bookkeeping are touched only under `mutex`.
final class HangWatchdog: @unchecked Sendable {
    static let shared = HangWatchdog()

    /// The calling thread's slot; the destructor unlists it when the thread exits.
    private static let local = TKThreadLocal<HangSlot>(destructor: { HangWatchdog.shared.unlist($0) })

    private let mutex = RawMutex()
    private var slots: [ObjectIdentifier: HangSlot] = [:] // guarded by mutex
    private var running = false // guarded by mutex: a watchdog thread should run
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
        let thread = TKThread(name: "tk.hang-watch") { HangWatchdog.shared.watch(start) }
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
            let keepRunning = running && generation == mine
            let limit = threshold
            let listed = Array(slots.values)
            mutex.unlockInternal(tid)
            guard keepRunning else { return }
            let now = Contention.now()
            let limitNs = UInt64(limit.components.seconds) * 1_000_000_000 + UInt64(limit.components.attoseconds / 1_000_000_000)
            for slot in listed {
                let mark = slot.current
                let started = mark.started
                // `started > now` happens: the slot's thread began its activity after `now` was
                // read (the subtraction wrapped, and the report's Int64 conversion trapped once in CI).
                guard let activity = mark.activity, started != 0, now > started, now - started >= limitNs,
                    slot.reportedStart.exchange(started, ordering: .relaxed) != started
                else { continue }
                let report = sample(slot, activity: activity, running: .nanoseconds(Int64(now &- started)))
                TKDiagnostics.deliver(report)
                // The flight recorder's last seconds (docs/DiagnosticsTrace.md §8), written here.
                if DiagnosticsSwitch.isOn(.flightRecorder) {
                    FlightRecorder.dumpOnTrigger(reason: "the hang of \(report.thread) in \(report.activity)")
                }
            }
            // A quarter threshold between scans: a hang is seen within 1.25 thresholds (plus sampling).
            let pause = max(limit / 4, .milliseconds(2))
            _ = Parking.park(wakeWord, expected: seen, deadline: .now + pause)
        }
    }

    /// Signals the slot's thread for its stack and waits up to 500 ms for the handler.
    private func sample(_ slot: HangSlot, activity: HangActivity, running: Duration) -> TKHangReport {
        let frames = HangWatchdog.sampleStack(of: slot.tid)
        let thread = LockOrderThread(tid: slot.tid, name: LockOrderThread.name(of: slot.tid))
        // Who waits for whom (§6): every known thread, with the stacks of those in a ThreadKit wait
        // (their parking retries after the sampling signal; other threads are not signalled).
        let dump = ThreadDumper.capture(stacks: .waiting).description
        return TKHangReport(
            thread: thread.description, threadID: slot.tid, activity: activity.description,
            duration: running, addresses: frames, threadDump: dump)
    }

    /// The sampler takes one request at a time: the watchdog and the blocking checker's pool
    /// reports (BlockingChecker) both sample. Synchronization's Mutex: no `Parking` under it.
    private static let samplerLock = Mutex<Void>(())

    /// Thread `tid`'s stack, innermost first, sampled by signalling it (empty if it could not be):
    /// waits up to 500 ms for the handler per sample. A sample that holds only the interrupted
    /// frame (the unwinder could not step out of it: the signal landed in a prologue, or in a
    /// function without unwind tables) is taken again, up to `sampleAttempts` in all: the hang
    /// test's spin loop was once caught at `Duration.<`+0x1 with nothing beneath (ci52,
    /// 2026-11-27), and a thread still stuck is somewhere else a moment later.
    static func sampleStack(of tid: UInt32) -> [UInt] {
        _ = tk_hang_sampler_install()
        return samplerLock.withLock { _ in
            var frames = sampleStackLocked(of: tid)
            var attempts = 1
            while frames.count == 1 && attempts < sampleAttempts {
                frames = sampleStackLocked(of: tid)
                attempts += 1
            }
            return frames
        }
    }

    /// Samples taken at most per stack (`sampleStack`).
    static let sampleAttempts = 4

    private static func sampleStackLocked(of tid: UInt32) -> [UInt] {
        let done = FutexWord(0)
        var frames: [UInt] = []
        if tk_hang_sample_request(tid, done.address) == 0 {
            let deadline = ContinuousClock.now + .milliseconds(500)
            while done.pointer.pointee.load(ordering: .acquiring) == 0 {
                if !Parking.park(done, expected: 0, deadline: deadline) { break }
            }
            tk_hang_sample_cancel()
            // The last use of `done`, after the cancel: the word is freed only after it.
            let count = Int(done.pointer.pointee.load(ordering: .acquiring))
            if count > 0, let buffer = tk_hang_sample_frames() {
                // Skip the handler's own frame and the signal trampoline.
                frames = (min(2, count - 1)..<(count - 1)).map { UInt(bitPattern: buffer[$0]) }
            }
        }
        return frames
    }
}
