// DispatchPool+Monitor: notices workers blocked outside ThreadKit (docs/DispatchPool.md, "Workers
// blocked outside ThreadKit"). A ThreadKit wait tells the pool at once (the ParkingObserver); a
// plain read(2), sleep(3), a pthread or Foundation lock does not. While a tier has work waiting and
// no room to admit it (or jobs wait in a worker's batch), one monitor thread looks at the tier's
// busy workers every `monitorTick`: a worker whose progress word has not changed since the previous
// tick (it has been inside the same job, outside any ThreadKit park, for at least one tick) loses
// its unstarted batch to the run queues, and if its thread spent less than half of a window
// (`RunnableWindow`, 4 ms) runnable and is asleep in a system call when the window closes, it is
// counted **stalled** instead of running, so another worker may take its place, within the hard
// cap. A stalled worker whose thread is runnable for half a window again, or whose job ends,
// counts as running again. Everything here runs on the monitor thread under the pool's lock,
// except `perform(_:)` (after unlocking, on the thread that decided the action) and the /proc
// reads of a tick (`ThreadLook`), which run between two lock visits so
// that a tick with many long jobs (~10 µs a read, up to three per worker) does not hold every
// worker and producer off the lock (`applyLooksLocked`).
import CThreadKit
import Glibc

extension DispatchPool {
    /// How often the monitor looks while it watches: a local queue behind a long job is handed
    /// back after one to two ticks, a worker blocked outside ThreadKit is replaced after two to
    /// three (libdispatch on Linux polls once a second). A tick costs one lock visit and one load
    /// per busy worker.
    static let monitorTick: Duration = .milliseconds(1)

    /// Guarded by the pool's lock.
    struct MonitorState {
        /// The monitor thread exists (started, not retired).
        var threadRunning = false
        /// It is ticking, or has been told to start: nobody needs to wake it.
        var awake = false
        /// Normal workers a background worker asked for, which the monitor starts (see
        /// `startWorkers`).
        var pendingNormalStarts = 0
    }

    enum MonitorAction { case none, wake, start }

    /// Whether the calling thread is a background-tier worker (nice 10, SCHED_BATCH).
    static var onBackgroundWorker: Bool {
        guard let raw = tk_pool_worker_get() else { return false }
        // safety: set by `PoolWorker.run` to its own worker and cleared before it returns, so a
        // non-nil value is this thread's live worker.
        return Unmanaged<PoolWorker>.fromOpaque(raw).takeUnretainedValue().background
    }

    /// Plans waking (or starting) the monitor if tier `t` has something to watch and the monitor
    /// sleeps. `batches`: look into the busy workers' batches too (a worker just took one); the
    /// submit path looks only at the run queues. Caller holds `lock`.
    @inline(__always)
    func watchLocked(_ t: Int, batches: Bool, _ actions: inout Actions) {
        lock.assertHeld("DispatchPool.lock")
        guard !monitor.pointee.awake, needsWatchLocked(t, batches: batches) else { return }
        guard monitor.pointee.threadRunning else {
            // A thread inherits its creator's nice value and cannot raise it: a monitor started
            // by a background worker would run, and start normal workers, at the background
            // class. The next submission from another thread starts it.
            if !DispatchPool.onBackgroundWorker { ensureMonitorLocked(&actions) }
            return
        }
        actions.monitor = .wake
        monitor.pointee.awake = true
    }

    /// Whether tier `t` has work that a stuck worker could hold up: jobs waiting with no room to
    /// admit them, or jobs waiting in a busy worker's batch. Caller holds `lock`.
    private func needsWatchLocked(_ t: Int, batches: Bool) -> Bool {
        lock.assertHeld("DispatchPool.lock")
        if scheduler.saturatedWithWork(Tier(rawValue: t)!) || scheduler[Tier(rawValue: t)!].crowdWaiting { return true }
        guard batches else { return false }
        for worker in scheduler[Tier(rawValue: t)!].workers where !worker.isIdle {
            if worker.local.count > 0 { return true }
        }
        return false
    }

    func perform(_ action: MonitorAction) {
        switch action {
        case .none: return
        case .wake: monitorEvent.set()
        case .start:
            let thread = TKThread(name: "tk.dispatch.monitor") { [self] in monitorLoop() }
            do {
                try thread.startOrThrow()
            } catch {
                // No thread now: the next submission that finds something to watch tries again.
                withPoolLock {
                    monitor.pointee = MonitorState()
                }
            }
        }
    }

    /// Makes sure the monitor thread runs: called by a thread that is not a background worker
    /// whenever the pool starts a worker, so that the monitor, started at the normal class, is
    /// there to start normal workers for background ones.
    func ensureMonitorLocked(_ actions: inout Actions) {
        lock.assertHeld("DispatchPool.lock")
        guard !monitor.pointee.threadRunning else { return }
        monitor.pointee.threadRunning = true
        monitor.pointee.awake = true
        actions.monitor = .start
    }

    /// Hands `count` normal-worker starts to the monitor; false if it does not run (its start
    /// failed), and the caller starts them itself. Called by a background worker.
    func delegateNormalStartsToMonitor(_ count: Int) -> Bool {
        let delegated = withPoolLock { () -> Bool in
            guard monitor.pointee.threadRunning else { return false }
            monitor.pointee.pendingNormalStarts += count
            return true
        }
        if delegated { monitorEvent.set() }
        return delegated
    }

    /// The monitor thread: look every tick while there is something to watch, and keep ticking
    /// while any worker is busy (sleeping whenever the run queues are momentarily empty would make
    /// every refill of a flood wake it again: a futex wake and a context switch per refill); sleep
    /// once the pool is idle, until woken. It lives as long as the process once started: it also
    /// starts the normal workers that background workers ask for (`startWorkers`).
    private func monitorLoop() {
        while true {
            lockPool()
            // Consume any set now: a wake that arrived while it ticked would otherwise leave the
            // event set, and every later tick's wait would return at once (the monitor spun,
            // taking a fifth of the only CPU from a flood). A set racing this reset was planned
            // under the lock before it and only costs one early tick.
            monitorEvent.reset()
            let starts = monitor.pointee.pendingNormalStarts
            monitor.pointee.pendingNormalStarts = 0
            var actions = Actions()
            var watching = false
            var looks: [PendingLook] = []
            let now = RunQueues.stamp()
            for t in 0..<2 {
                // A replacement paced or refused (PoolScheduler.mayReplaceBlockedWorker): offer again.
                if scheduler.crowdStartDue(Tier(rawValue: t)!, now: now) { offerWorkLocked(Tier(rawValue: t)!, &actions) }
                if needsWatchLocked(t, batches: true) {
                    scanLocked(t, now: now, &actions, &looks)
                    watching = true
                } else if scheduler[Tier(rawValue: t)!].running + scheduler[Tier(rawValue: t)!].stalled > 0 {
                    watching = true
                }
            }
            if !watching {
                monitor.pointee.awake = false
            }
            unlockPool()
            for _ in 0..<starts { startWorker(background: false) }
            actions.perform(self)
            if !looks.isEmpty {
                // The /proc reads, without the lock; then one more visit to apply what they found.
                for i in looks.indices {
                    looks[i].look = DispatchPool.lookAtThread(looks[i].worker.threadID.load(ordering: .relaxed))
                    looks[i].at = RunQueues.stamp()
                }
                var after = Actions()
                var stalledNow: [UInt32] = [] // for the blocking checker (docs/Diagnostics.md §5), when on
                lockPool()
                applyLooksLocked(looks, &after, &stalledNow)
                unlockPool()
                after.perform(self)
                if !stalledNow.isEmpty { BlockingChecker.poolNoticedBlockedWorkers(stalledNow) }
            }
            _ = monitorEvent.wait(deadline: watching ? .now + DispatchPool.monitorTick : nil, spinLimit: 0, observed: false)
        }
    }

    /// A busy worker whose thread the monitor looks at this tick, between its two lock visits: one
    /// inside the same job since the previous tick (`word`, observable, unchanged) whose window
    /// (`RunnableWindow`) is due to open or close, running (`stalled` false) or counted stalled.
    struct PendingLook {
        let worker: PoolWorker
        let tier: Tier
        let word: UInt64
        var look = ThreadLook(blocked: false, runnable: nil)
        /// When the look was taken (`RunQueues.stamp`).
        var at: UInt64 = 0
        var stalled: Bool { word & 1 != 0 }
    }

    /// One look at tier `t`'s busy workers at `now`: hands back the batch of each that has made no
    /// progress since the previous tick, and lists in `looks` the ones whose window opens or closes
    /// now. Caller holds `lock`.
    private func scanLocked(_ t: Int, now: UInt64, _ actions: inout Actions, _ looks: inout [PendingLook]) {
        lock.assertHeld("DispatchPool.lock")
        var freed = false
        let tier = Tier(rawValue: t)!
        for worker in scheduler[tier].workers where !worker.isIdle {
            let word = worker.activity.load(ordering: .acquiring)
            defer { worker.monitorSeen = word }
            guard word & 2 != 0, word == worker.monitorSeen else { continue }
            // Inside the same job since the last tick, not parked in ThreadKit.
            if word & 1 == 0 {
                // Its unstarted batch must not wait for it, whatever it is doing.
                giveBackLocked(worker)
                freed = true
                // Replacing it helps only if work waits with no room to admit it; only then is its
                // thread looked at (up to three /proc reads, ~30 µs, once per window).
                guard scheduler.saturatedWithWork(tier) else {
                    worker.monitorWindow = nil
                    continue
                }
            }
            if let window = worker.monitorWindow, window.word == word, now < window.closesAt { continue }
            looks.append(PendingLook(worker: worker, tier: tier, word: word))
        }
        if freed { offerWorkLocked(tier, &actions) }
    }

    /// Applies the looks taken since `scanLocked` listed them (`RunnableWindow.judge`): a running
    /// worker mostly blocked over its window counts stalled (if its tier still has work it cannot
    /// admit), a stalled one mostly runnable counts running. Each verdict is a compare-exchange
    /// against the word the scan saw, made under the lock together with the count it changes: a
    /// worker that has made progress since (its word moved on) is left alone, and one whose job
    /// ends after the mark finds `stalled` set and tells the pool, which then takes this same lock
    /// after this section. Caller holds `lock`.
    private func applyLooksLocked(_ looks: [PendingLook], _ actions: inout Actions, _ stalledNow: inout [UInt32]) {
        lock.assertHeld("DispatchPool.lock")
        var stalledIn: UInt8 = 0
        for pending in looks {
            let worker = pending.worker
            let tier = pending.tier
            let word = pending.word
            let (verdict, window) = RunnableWindow.judge(worker.monitorWindow, word: word, now: pending.at, look: pending.look)
            switch verdict {
            case .keep:
                worker.monitorWindow = window
            case .stall:
                guard scheduler.saturatedWithWork(tier) else {
                    worker.monitorWindow = nil
                    continue
                }
                guard flipStallBit(worker, from: word, to: word | 1, window: window) else { continue }
                scheduler.stall(tier)
                stalledIn |= tier.bit
                if DiagnosticsSwitch.isOn(.blocking) { stalledNow.append(worker.threadID.load(ordering: .relaxed)) }
            case .unstall:
                // Runnable again inside the same job: it counts as running (the tier may be over
                // width until a worker reaches a job boundary).
                guard flipStallBit(worker, from: word, to: word & ~1, window: window) else { continue }
                scheduler.unstall(tier)
            }
        }
        // A stalled worker left room in its tier: admit the work that waits.
        for tier in Tier.allCases where stalledIn & tier.bit != 0 { offerWorkLocked(tier, &actions) }
    }

    /// Moves `worker`'s stall bit (bit 0 of `activity`) from the word the monitor judged to
    /// `desired`, only if the worker is still in that job and state; the window goes on with the
    /// new word. When the word moved on meanwhile the window is dropped and nothing changes.
    /// Caller holds lock.
    private func flipStallBit(_ worker: PoolWorker, from word: UInt64, to desired: UInt64, window: RunnableWindow) -> Bool {
        guard worker.activity.compareExchange(expected: word, desired: desired, ordering: .acquiringAndReleasing).exchanged else {
            worker.monitorWindow = nil
            return false
        }
        worker.monitorWindow = window
        worker.monitorSeen = desired // the word the next tick compares with
        return true
    }

    /// Reads thread `tid`'s state and its runnable time (three small /proc reads, ~10 µs each).
    static func lookAtThread(_ tid: UInt32) -> ThreadLook {
        ThreadLook(blocked: threadIsBlocked(tid), runnable: threadRunnableTime(tid))
    }

    /// Nanoseconds thread `tid` of this process has been runnable: on a CPU plus waiting on a run
    /// queue (the first two fields of /proc/self/task/TID/schedstat); nil if unknown (no such
    /// thread, or a kernel without schedstat).
    static func threadRunnableTime(_ tid: UInt32) -> UInt64? {
        guard tid != 0, let stat = SystemCall.readSmallFile("/proc/self/task/\(tid)/schedstat", limit: 128) else {
            return nil
        }
        let fields = stat.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 2, let running = UInt64(fields[0]), let waiting = UInt64(fields[1]) else { return nil }
        return running &+ waiting
    }

    /// Whether kernel thread `tid` of this process is asleep in a system call: sleeping (`S`) or in
    /// an uninterruptible wait (`D`) per /proc/self/task/TID/stat, and inside a system call per
    /// /proc/self/task/TID/syscall (`sleepsInASystemCall`). False if unknown.
    static func threadIsBlocked(_ tid: UInt32) -> Bool {
        guard tid != 0, let stat = SystemCall.readSmallFile("/proc/self/task/\(tid)/stat", limit: 512),
            let close = stat.lastIndex(of: ")")
        else { return false }
        // "TID (COMM) STATE ...": COMM may hold spaces and parentheses, so look after the last ')'.
        let rest = stat[stat.index(after: close)...].drop(while: { $0 == " " })
        guard let state = rest.first, state == "S" || state == "D" else { return false }
        return sleepsInASystemCall(SystemCall.readSmallFile("/proc/self/task/\(tid)/syscall", limit: 256))
    }

    /// Reads /proc/self/task/TID/syscall of a sleeping thread: "NR ARGS… SP PC" inside system call
    /// NR, "-1 SP PC" asleep outside any (a page fault), "running" if it ran again. Blocked means
    /// waiting for something the program awaits: data (read(2)), a lock or condition (futex), a
    /// timer (nanosleep). Not blocked: a page fault, or a call that maps, unmaps or protects memory
    /// (`tk_syscall_changes_address_space`). Both wait for the address space's lock (or a page from
    /// disk) and go on as soon as the kernel is done, and a replacement thread would only add to
    /// the wait: the kernel maps its stack under the same lock. Under ThreadSanitizer at
    /// `TK_CPU_BUDGET=16` on 2 cores, CPU-bound jobs waited 2 ms and more in
    /// `lock_mm_and_find_vma` (a fault) and in `vm_mmap_pgoff` (the sanitizer's mmap) while other
    /// workers started. Go's sysmon likewise retakes a P only from a thread inside a system call,
    /// and its runtime maps memory without entering one. Where the file cannot be read (a kernel
    /// without it), any sleep counts.
    static func sleepsInASystemCall(_ syscallFile: String?) -> Bool {
        guard let syscallFile else { return true }
        guard let first = syscallFile.split(whereSeparator: { $0 == " " || $0 == "\n" }).first else { return true }
        if first == "running" { return false }
        guard let number = Int(first) else { return true }
        return number >= 0 && tk_syscall_changes_address_space(number) == 0
    }
}
