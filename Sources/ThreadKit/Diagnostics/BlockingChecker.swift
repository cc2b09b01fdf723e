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
// (told apart by their symbols, dladdr) — is reported once; `blocking:fatal` stops the process at
// the first one instead.
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
        var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 48)
        let n = Int(buffer.withUnsafeMutableBufferPointer { tk_backtrace($0.baseAddress, 48) })
        let addresses = buffer.prefix(n).map { UInt(bitPattern: $0) }
        let site = callSite(in: FrameSymbol.of(addresses))
        report(
            place: place, starves: starves, noticedBy: "a ThreadKit wait that parked in the kernel",
            thread: LockOrderThread.current(), addresses: addresses, site: site)
    }

    /// The pool's monitor counted these workers stalled: blocked outside ThreadKit (a read(2), a
    /// sleep(3), a foreign lock) inside a job while work waited. Called on the monitor thread with
    /// no lock held. Each worker's stack is sampled (the hang watchdog's signal); one inside a
    /// Swift concurrency job (`swift_job_run` on its stack) is reported.
    static func poolNoticedBlockedWorkers(_ threadIDs: [UInt32]) {
        for tid in threadIDs {
            let frames = HangWatchdog.sampleStack(of: tid)
            let symbols = FrameSymbol.of(frames)
            // swift_job_run, or its task-executor variants (swift_job_run_on_task_executor, …).
            guard symbols.contains(where: { $0.name.hasPrefix("swift_job_run") }) else { continue }
            let thread = LockOrderThread(tid: tid, name: LockOrderThread.name(of: tid))
            report(
                place: .swiftConcurrencyJob,
                starves: "a Swift concurrency job on a ThreadKit pool worker (the pool counts it stalled and may "
                    + "start another worker in its place, up to its limit)",
                noticedBy: "the dispatch pool's monitor: blocked outside ThreadKit", thread: thread,
                addresses: frames, site: callSite(in: symbols))
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

    /// Index of the call site in `addresses`: the first frame of other code than ThreadKit's and the
    /// system libraries'. ThreadKit's private helpers have no exported name, but each lies under a
    /// named ThreadKit frame, and a public entry point always has a name: so the first unnamed
    /// frame after the last named ThreadKit (or system) frame is the caller's own (a private
    /// function of it), and otherwise the first named frame of other code is. Without exported
    /// names at all that is frame 0, and the key covers the whole leading stack.
    static func callSite(in symbols: [FrameSymbol]) -> Int {
        var unnamedRun: Int?
        for (index, symbol) in symbols.prefix(24).enumerated() {
            switch symbol.owner {
            case .threadKit, .system: unnamedRun = nil
            case .unnamed: if unnamedRun == nil { unnamedRun = index }
            case .caller: return unnamedRun ?? index
            }
        }
        return unnamedRun ?? 0
    }

    /// The key of a call site: its address and the one above it (FNV-1a); the whole leading stack
    /// when no ThreadKit frame was named.
    static func key(of addresses: [UInt], site: Int) -> UInt64 {
        let part = site > 0 ? addresses.dropFirst(site).prefix(2) : addresses.prefix(12)
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for address in part { hash = (hash ^ UInt64(address)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    // MARK: Reports

    private static func report(
        place: TKBlockingReport.Place, starves: String, noticedBy: String, thread: LockOrderThread, addresses: [UInt],
        site: Int
    ) {
        let key = key(of: addresses, site: site)
        guard state.withLock({ $0.seen.insert(key).inserted }) else { return }
        let report = TKBlockingReport(
            place: place, starves: starves, noticedBy: noticedBy, thread: thread, addresses: addresses, siteIndex: site)
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
        }
    }
}

/// One return address's image and exported symbol (backtrace_symbols, i.e. dladdr: exported names
/// only), and whose code it is, for finding call sites.
struct FrameSymbol {
    enum Owner { case threadKit, system, unnamed, caller }

    /// The mangled (or C) symbol name; empty when the address has no exported name.
    let name: String
    let owner: Owner

    /// The frames' symbols, one per address (one backtrace_symbols call).
    static func of(_ addresses: [UInt]) -> [FrameSymbol] {
        var frames = addresses.map { UnsafeMutableRawPointer(bitPattern: $0) }
        let count = Int32(frames.count)
        guard count > 0, let lines = frames.withUnsafeMutableBufferPointer({ tk_backtrace_symbols($0.baseAddress, count) })
        else { return addresses.map { _ in FrameSymbol(name: "", owner: .unnamed) } }
        defer { free(lines) }
        return (0..<frames.count).map { lines[$0].map { FrameSymbol(line: String(cString: $0)) } ?? FrameSymbol(name: "", owner: .unnamed) }
    }

    init(name: String, owner: Owner) {
        self.name = name
        self.owner = owner
    }

    /// From glibc's `image(symbol+0xoffset) [0xaddress]` (`image(+0xoffset)` without a name).
    init(line: String) {
        let open = line.firstIndex(of: "(")
        let image = open.map { String(line[..<$0]) } ?? ""
        var name = ""
        if let open, let end = line[open...].firstIndex(where: { $0 == "+" || $0 == ")" }) {
            name = String(line[line.index(after: open)..<end])
        }
        self.name = name
        if name.hasPrefix("$s9ThreadKit") || name.hasPrefix("tk_") {
            owner = .threadKit
        } else if FrameSymbol.isSystemImage(image) {
            owner = .system
        } else {
            owner = name.isEmpty ? .unnamed : .caller
        }
    }

    /// libc, the dynamic loader, the Swift runtime and core libraries: never the call site.
    private static func isSystemImage(_ path: String) -> Bool {
        let file = path.split(separator: "/").last.map(String.init) ?? path
        let system = [
            "libc.", "libc-", "libpthread", "ld-linux", "linux-vdso", "libgcc_s", "libstdc++", "libm.", "libswift",
            "libFoundation", "libdispatch", "libBlocksRuntime",
        ]
        return system.contains { file.hasPrefix($0) }
    }
}
