// BlockingChecker: blocking in the wrong place (docs/Diagnostics.md §5). With `.blocking` on,
// `Parking.park` calls `willPark` on its slow path, just before the kernel wait (every public
// ThreadKit wait funnels there: lock slow paths, conditions, semaphores, groups, `sync` onto a busy
// queue, joins, operations' `waitUntilFinished`, perform `waitUntilDone`, `TKThread.sleep`), and the
// dispatch pool's monitor calls `poolNoticedBlockedWorkers` with the workers it found blocked
// outside ThreadKit. A wait is reported when the thread must not block: (a) it runs a Swift
// concurrency job (the runtime's current task is set), on Swift's cooperative pool or a ThreadKit
// executor; (b) it is the main thread and `TKRunLoop.main` runs there; (c) it is the thread of a
// running loop that actors use as their SerialExecutor (the loop's executor book has counted jobs).
// Each call site — the first two return addresses of the caller's code above ThreadKit's own frames
// (told apart by their symbols: CallStack.callSite, docs/Diagnostics.md §7) — is reported once;
// `blocking:fatal` stops the process at the first one instead. A stack is symbolicated the first
// time it is seen only (its key is its leading addresses), on the thread about to park anyway.
//
// Threads: the hooks run on the waiting thread (park) or the monitor thread; `state` is guarded by
// its Mutex, Synchronization's, which waits on a futex of its own and never re-enters `Parking`
// (the hook runs inside `Parking.park`). Reports are made and delivered with it released.
// `mainLoop` is written once, by the main loop's initializer, and read by any thread.
import CThreadKit
import Glibc
import Synchronization

enum BlockingChecker {
    private struct State {
        /// Call-site keys already reported (forgotten by `TKDiagnostics.resetReports`).
        var seen: Set<UInt64> = []
        /// Whole stacks already looked at (`stackKey`; forgotten with `seen`).
        var stacksSeen: Set<UInt64> = []
        /// The last 100 reports.
        var reports: [TKBlockingReport] = []
        var handler: (@Sendable (TKBlockingReport) -> Void)?
    }
    private static let state = Mutex(State())

    /// The main loop once it exists (unretained: it lives as long as the process). Registered by
    /// its initializer so the hook never makes it: making it there could park inside its own
    /// one-time initialization and re-enter it. Releasing/acquiring: a reader sees it initialized.
    private static let mainLoop = Atomic<UInt>(0)

    /// Called once, by the main thread's loop as it is made.
    static func mainLoopMade(_ loop: TKRunLoop) {
        mainLoop.store(UInt(bitPattern: Unmanaged.passUnretained(loop).toOpaque()), ordering: .releasing)
    }

    // MARK: Hooks

    /// The calling thread is about to park in the kernel (`Parking.park`, behind
    /// `DiagnosticsSwitch.isOn(.blocking)`).
    @inline(never)
    static func willPark() {
        guard let (place, starves) = placeOfCurrentThread() else { return }
        let stack = CallStack.capture(skipping: 0)
        // A stack seen before was reported (or its call site was): no symbolication.
        let fresh = state.withLock { state -> Bool in
            if state.stacksSeen.count >= 4_096 { state.stacksSeen.removeAll() } // `seen` still holds the sites
            return state.stacksSeen.insert(stackKey(stack.addresses)).inserted
        }
        guard fresh else { return }
        report(
            place: place, starves: starves, noticedBy: "a ThreadKit wait that parked in the kernel",
            thread: LockOrderThread.current(), stack: stack, frames: stack.frames)
    }

    /// The pool's monitor counted these workers stalled: blocked outside ThreadKit (a read(2), a
    /// sleep(3), a foreign lock) inside a job while work waited. Called on the monitor thread with
    /// no lock held. Each worker's stack is sampled (the hang watchdog's signal); one inside a
    /// Swift concurrency job (`swift_job_run` on its stack) is reported.
    static func poolNoticedBlockedWorkers(_ threadIDs: [UInt32]) {
        for tid in threadIDs {
            let stack = CallStack(addresses: HangWatchdog.sampleStack(of: tid))
            let frames = stack.frames
            // swift_job_run, or its task-executor variants (swift_job_run_on_task_executor, …).
            guard frames.contains(where: { $0.rawName.hasPrefix("swift_job_run") }) else { continue }
            let thread = LockOrderThread(tid: tid, name: LockOrderThread.name(of: tid))
            report(
                place: .swiftConcurrencyJob,
                starves: "a Swift concurrency job on a ThreadKit pool worker (the pool counts it stalled and may "
                    + "start another worker in its place, up to its limit)",
                noticedBy: "the dispatch pool's monitor: blocked outside ThreadKit", thread: thread, stack: stack,
                frames: frames)
        }
    }

    // MARK: Where the thread is

    /// What a wait on the calling thread would starve, or nil where blocking is fine.
    static func placeOfCurrentThread() -> (TKBlockingReport.Place, String)? {
        if SystemCall.currentThreadID == TKRunLoop.mainThreadID {
            // safety: the address is the main loop's, which is never freed (a static let).
            if let raw = UnsafeRawPointer(bitPattern: mainLoop.load(ordering: .acquiring)),
                Unmanaged<TKRunLoop>.fromOpaque(raw).takeUnretainedValue().runDepth.load(ordering: .relaxed) > 0
            {
                return (.mainRunLoop, "the main thread's run loop (TKRunLoop.main)")
            }
        } else if let loop = TKRunLoop.currentIfMade, loop.runDepth.load(ordering: .relaxed) > 0,
            loop.jobBook.all.queued.load(ordering: .relaxed) > 0
        {
            return (.actorRunLoop, "the loop thread of actor executor TKRunLoop of \(loop.ownerDescription)")
        }
        guard withUnsafeCurrentTask(body: { $0 != nil }) else { return nil }
        return (.swiftConcurrencyJob, describeJobThread())
    }

    private static func describeJobThread() -> String {
        guard tk_pool_worker_get() != nil else {
            return "a Swift concurrency job on the cooperative pool (\(CPUBudget.onlineCPUs()) threads)"
        }
        if let queue = DispatchContext.existing?.innermost {
            if case .root = queue.kind {
            } else {
                return "a Swift concurrency job on \(queue.described) (its executor: the queue's other work and jobs wait)"
            }
        }
        return "a Swift concurrency job on a ThreadKit pool worker (the pool's task or global executor: it starts "
            + "another worker in its place, up to its limit)"
    }

    // MARK: Call sites

    /// The key of a whole stack (its leading 16 addresses, FNV-1a): a wait from a stack seen
    /// before is not symbolicated again.
    static func stackKey(_ addresses: [UInt]) -> UInt64 { hash(addresses.prefix(16)) }

    /// The key of a call site (CallStack.callSite): its address and the one above it; the whole
    /// leading stack when no call site was found.
    static func siteKey(of frames: [SymbolicatedFrame], _ addresses: [UInt]) -> UInt64 {
        guard let site = CallStack.callSite(in: frames), let index = addresses.firstIndex(of: frames[site].address) else {
            return hash(addresses.prefix(12))
        }
        return hash(addresses.dropFirst(index).prefix(2))
    }

    private static func hash(_ part: ArraySlice<UInt>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for address in part { hash = (hash ^ UInt64(address)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    // MARK: Reports

    private static func report(
        place: TKBlockingReport.Place, starves: String, noticedBy: String, thread: LockOrderThread, stack: CallStack,
        frames: [SymbolicatedFrame]
    ) {
        let key = siteKey(of: frames, stack.addresses)
        guard state.withLock({ $0.seen.insert(key).inserted }) else { return }
        let report = TKBlockingReport(place: place, starves: starves, noticedBy: noticedBy, thread: thread, stack: stack)
        if DiagnosticsSwitch.isOn(.blockingFatal) {
            misuse(
                "\(report.description)\n(TK_DIAGNOSTICS=blocking:fatal stops the process at the first blocking wait in "
                    + "the wrong place.)")
        }
        let handler = state.withLock { state -> (@Sendable (TKBlockingReport) -> Void)? in
            state.reports.append(report)
            if state.reports.count > 100 { state.reports.removeFirst() }
            return state.handler
        }
        if TKDiagnostics.printsReports { TKDiagnostics.printError(report.description) }
        handler?(report)
    }

    static var reports: [TKBlockingReport] { state.withLock { $0.reports } }

    static func setHandler(_ handler: (@Sendable (TKBlockingReport) -> Void)?) {
        state.withLock { $0.handler = handler }
    }

    /// Forgets the reports and the call sites seen, so each may be reported again.
    static func forgetReports() {
        state.withLock {
            $0.reports.removeAll()
            $0.seen.removeAll()
            $0.stacksSeen.removeAll()
        }
    }
}
