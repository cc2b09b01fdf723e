import Foundation
import Glibc
import Synchronization
// Stress: `tkbench stress [--seconds N] [--producers P]` (issue 24, item 6). Runs the dispatch
// pool's stress workloads side by side for N seconds (default 60), each as rounds of a bounded
// batch whose every item is counted, then prints one line per workload (ran, expected, out of
// order, failures) and exits 0 only if every count matches and nothing ran out of order:
//   - global queues at all five QoS levels, fed by P producer threads (default: the CPU count, at
//     least 4);
//   - 200 serial queues, each fed by one producer (a producer feeds several), items carrying their
//     index: an item that runs out of order, or beside another of its queue, is a failure;
//   - follow-ups submitted from pool workers (binary trees of items: the pool's stealing path);
//   - `sync` onto a serial and a concurrent queue, from producer threads and from pool items;
//   - barriers (async and sync) on a concurrent queue: a barrier must find nothing else running and
//     every block submitted before it finished (counters), and no block may start while it runs;
//   - TKOperationQueue with dependencies (chains and a fan-in; an operation that starts before a
//     dependency finished counts as out of order);
//   - blocked workers: items waiting on a TKDispatchSemaphore and items blocked in read(2) on a
//     pipe, released by an item submitted after them (at most threadCap / 2 blocked at once).
// Counts are judged by independent means only: pthread-mutex counters (StressTally) and Foundation's
// DispatchGroup (a round's end), never a ThreadKit primitive. A watchdog thread (Foundation Thread)
// checks progress every 100 ms: when no item completed for more than 5 s while items are
// outstanding it prints TKPoolIntrospection.stateDescription() (from a helper thread, given 2 s:
// it takes the pool lock), every thread's /proc/self/task entry (state, wchan, comm) and, when gdb
// is on PATH, `gdb -p PID -batch -ex "thread apply all bt"`, then exits with status 3. ThreadKit
// has no public or SPI way to sample every thread's stack (HangWatchdog samples one slot's thread
// by signal), hence /proc and gdb. `--wedge-test` runs only an item that never ends, to see that
// report.
// Threads: the main thread parses, starts one driver thread per workload and the watchdog, waits
// for the drivers and prints the summary; drivers start producer threads (Parallel.swift) per
// round; items run on ThreadKit's pool. StressTally and StressProgress are safe from any thread.
@_spi(Benchmarks) import ThreadKit

/// Items submitted and completed by every workload: what the watchdog watches (progress only;
/// the judgement is the Tallies').
final class StressProgress: Sendable {
    let submitted = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
    var outstanding: Int { submitted.load(ordering: .relaxed) - completed.load(ordering: .relaxed) }
}

/// One workload's counts, under a pthread mutex.
final class StressTally: @unchecked Sendable {
    let name: String
    private let progress: StressProgress
    private var mutex = pthread_mutex_t()
    private var expected = 0, ran = 0, outOfOrder = 0, failures = 0
    /// When an item last completed (or items became outstanding), and the longest time this
    /// workload had items outstanding without one completing (ns): starvation of one workload,
    /// which the process-wide watchdog does not see while others progress.
    private var lastEvent: UInt64 = 0, longestWait: UInt64 = 0
    private var messages: [String] = [] // the first few failures, as text

    init(_ name: String, _ progress: StressProgress) {
        self.name = name
        self.progress = progress
        pthread_mutex_init(&mutex, nil)
    }
    deinit { pthread_mutex_destroy(&mutex) }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }

    /// `n` more items will run (called before they are submitted).
    func expect(_ n: Int) {
        locked {
            if expected == ran { lastEvent = now() }
            expected += n
        }
        progress.submitted.wrappingAdd(n, ordering: .relaxed)
    }

    /// One item ran.
    func ran(_ n: Int = 1) {
        locked {
            let t = now()
            if expected > ran { longestWait = max(longestWait, t - lastEvent) }
            lastEvent = t
            ran += n
        }
        progress.completed.wrappingAdd(n, ordering: .relaxed)
    }

    func outOfOrder(_ message: String) {
        locked {
            outOfOrder += 1
            if messages.count < 3 { messages.append(message) }
        }
    }

    func fail(_ message: String) {
        locked {
            failures += 1
            if messages.count < 3 { messages.append(message) }
        }
    }

    var counts: (expected: Int, ran: Int, outOfOrder: Int, failures: Int, messages: [String], longestWait: Double) {
        locked { (expected, ran, outOfOrder, failures, messages, Double(longestWait) / 1e9) }
    }
    var outstanding: Int { locked { expected - ran } }
}

enum Stress {
    /// A workload: its tallies, and one round (submits a batch and waits until it ran).
    typealias Workload = (tallies: [StressTally], round: @Sendable () -> Void)

    static let levels: [(String, TKQualityOfService)] = [
        ("background", .background), ("utility", .utility), ("default", .default),
        ("userInitiated", .userInitiated), ("userInteractive", .userInteractive),
    ]

    /// `tkbench stress [--seconds N] [--producers P]`; returns the exit status.
    static func main(_ arguments: [String]) -> Int32 {
        func value(_ flag: String) -> Int? {
            arguments.firstIndex(of: flag).flatMap { $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil }
        }
        let seconds = max(1, value("--seconds") ?? 60)
        let producers = max(1, value("--producers") ?? max(4, ProcessInfo.processInfo.activeProcessorCount))
        let cap = TKPoolIntrospection.threadCap
        let blockedPerKind = max(1, min(8, cap / 4)) // semaphore waiters and read(2) readers each
        let poolSyncs = max(1, min(producers, cap / 4)) // pool items blocked in a sync at once
        print(
            "tkbench stress: \(seconds) s, \(producers) producers, pool width \(TKPoolIntrospection.width), "
                + "thread cap \(cap); \(blockedPerKind) semaphore waiters + \(blockedPerKind) read(2) readers per round; "
                + "watchdog: 5 s without a completed item")
        fflush(nil)

        let progress = StressProgress()
        let deadline = now() + UInt64(seconds) * 1_000_000_000
        let workloads: [Workload] =
            arguments.contains("--wedge-test")
            ? [wedge(progress)]
            : [
                globalQueues(producers, progress), serialQueues(producers, progress), stealing(producers, progress),
                syncs(producers, poolSyncs, progress), barriers(progress), operations(progress),
                blockedWorkers(blockedPerKind, progress),
            ]
        let tallies = workloads.flatMap(\.tallies)

        let watchdog = Watchdog(progress: progress, tallies: tallies, start: now())
        watchdog.start()
        let finished = DispatchSemaphore(value: 0)
        let rounds = Atomic<Int>(0)
        for (index, workload) in workloads.enumerated() {
            let thread = Thread {
                repeat {
                    workload.round()
                    rounds.wrappingAdd(1, ordering: .relaxed)
                } while now() < deadline
                finished.signal()
            }
            thread.name = "stress-driver-\(index)"
            thread.start()
        }
        for _ in workloads { finished.wait() }
        watchdog.stop()

        print("\n| workload | ran | expected | out of order | failures | longest wait for an item | |")
        print("|---|---|---|---|---|---|---|")
        var ok = true
        for tally in tallies {
            let c = tally.counts
            let good = c.ran == c.expected && c.outOfOrder == 0 && c.failures == 0 && c.expected > 0
            ok = ok && good
            print(
                "| \(tally.name) | \(c.ran) | \(c.expected) | \(c.outOfOrder) | \(c.failures) | "
                    + String(format: "%.2f s", c.longestWait) + " | \(good ? "ok" : "FAILED") |")
            for m in c.messages { print("|   \(m) | | | | | | |") }
        }
        print(
            "\nstress: \(rounds.load(ordering: .relaxed)) rounds, \(progress.completed.load(ordering: .relaxed)) items in "
                + String(format: "%.1f s", Double(now() - watchdog.startTime) / 1e9) + "; longest gap between completions "
                + String(format: "%.2f s", watchdog.longestGap) + (ok ? "; PASSED" : "; FAILED"))
        fflush(nil)
        return ok ? 0 : 1
    }

    /// A little work, so items overlap.
    private static func spin(_ iterations: Int) {
        var x = 0
        for i in 0..<iterations { x &+= i }
        blackHole(x)
    }

    /// `--wedge-test`: one item that never ends (a Foundation semaphore nobody signals), so the
    /// watchdog reports after 5 s.
    static func wedge(_ progress: StressProgress) -> Workload {
        let tally = StressTally("an item blocked forever (--wedge-test)", progress)
        return (
            [tally],
            {
                tally.expect(1)
                TKDispatchQueue.global().async {
                    DispatchSemaphore(value: 0).wait()
                    tally.ran()
                }
                while true { sleep(1) }
            }
        )
    }

    // MARK: Global queues at five QoS levels

    static func globalQueues(_ producers: Int, _ progress: StressProgress) -> Workload {
        let tallies = levels.map { StressTally("global queue, \($0.0)", progress) }
        let queues = levels.map { TKDispatchQueue.global(qos: $0.1) }
        let each = 400 // per producer and level per round
        return (
            tallies,
            {
                let group = DispatchGroup()
                _ = parallel(producers) { _ in
                    for t in tallies { t.expect(each) }
                    for _ in 0..<(each * queues.count) { group.enter() }
                    for _ in 0..<each {
                        for (level, q) in queues.enumerated() {
                            let tally = tallies[level]
                            q.async {
                                tally.ran()
                                group.leave()
                            }
                        }
                    }
                }
                group.wait()
            }
        )
    }

    // MARK: Serial queues, one producer each

    final class SerialState: @unchecked Sendable {
        let queue: TKDispatchQueue
        let inFlight = Atomic<Int>(0)
        var mutex = pthread_mutex_t()
        var next = 0 // guarded by mutex: the index the next item should carry
        var submitted = 0 // touched only by the queue's one producer (one round at a time)
        init(_ index: Int) {
            queue = TKDispatchQueue(label: "stress-serial-\(index)", qos: Stress.levels[index % Stress.levels.count].1)
            pthread_mutex_init(&mutex, nil)
        }
    }

    static func serialQueues(_ producers: Int, _ progress: StressProgress) -> Workload {
        let tally = StressTally("200 serial queues, in order", progress)
        let states = (0..<200).map(SerialState.init)
        let each = 50 // per queue per round
        return (
            [tally],
            {
                let group = DispatchGroup()
                _ = parallel(producers) { p in
                    let mine = stride(from: p, to: states.count, by: producers).map { states[$0] }
                    tally.expect(mine.count * each)
                    for _ in 0..<(mine.count * each) { group.enter() }
                    for _ in 0..<each {
                        for (q, state) in zip(stride(from: p, to: states.count, by: producers), mine) {
                            let index = state.submitted
                            state.submitted += 1
                            state.queue.async {
                                if state.inFlight.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue != 1 {
                                    tally.fail("serial queue \(q): item \(index) ran beside another item of its queue")
                                }
                                pthread_mutex_lock(&state.mutex)
                                let expected = state.next
                                state.next = index + 1
                                pthread_mutex_unlock(&state.mutex)
                                if index != expected { tally.outOfOrder("serial queue \(q): item \(index) ran where \(expected) was due") }
                                state.inFlight.wrappingSubtract(1, ordering: .acquiringAndReleasing)
                                tally.ran()
                                group.leave()
                            }
                        }
                    }
                }
                group.wait()
            }
        )
    }

    // MARK: Follow-ups from pool workers (stealing)

    static func stealing(_ producers: Int, _ progress: StressProgress) -> Workload {
        let tally = StressTally("follow-ups from pool workers", progress)
        let depth = 10 // a tree of 2^11 - 1 items per root
        let perRoot = (1 << (depth + 1)) - 1
        return (
            [tally],
            {
                let group = DispatchGroup()
                let roots = producers
                tally.expect(roots * perRoot)
                for _ in 0..<(roots * perRoot) { group.enter() }
                @Sendable func node(_ level: Int, _ q: TKDispatchQueue) {
                    if level < depth {
                        q.async { node(level + 1, q) }
                        q.async { node(level + 1, q) }
                    }
                    spin(200)
                    tally.ran()
                    group.leave()
                }
                for r in 0..<roots {
                    let q = TKDispatchQueue.global(qos: levels[2 + r % 3].1)
                    q.async { node(0, q) }
                }
                group.wait()
            }
        )
    }

    // MARK: sync onto serial and concurrent queues

    static func syncs(_ producers: Int, _ poolSyncs: Int, _ progress: StressProgress) -> Workload {
        let serialTally = StressTally("sync onto a serial queue", progress)
        let concurrentTally = StressTally("sync onto a concurrent queue", progress)
        let serial = TKDispatchQueue(label: "stress-sync-serial")
        let concurrent = TKDispatchQueue(label: "stress-sync-concurrent", attributes: .concurrent)
        let inSerial = Atomic<Int>(0)
        let each = 200 // syncs per producer (and per pool item) per round
        @Sendable func run(_ who: String) {
            serialTally.expect(each)
            concurrentTally.expect(each)
            for i in 0..<each {
                let a = serial.sync { () -> Int in
                    if inSerial.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue != 1 {
                        serialTally.fail("\(who): a sync block ran beside another on the serial queue")
                    }
                    spin(50)
                    inSerial.wrappingSubtract(1, ordering: .acquiringAndReleasing)
                    serialTally.ran()
                    return i * 3
                }
                if a != i * 3 { serialTally.fail("\(who): serial sync returned \(a), not \(i * 3)") }
                let b = concurrent.sync { () -> Int in
                    spin(50)
                    concurrentTally.ran()
                    return i * 5
                }
                if b != i * 5 { concurrentTally.fail("\(who): concurrent sync returned \(b), not \(i * 5)") }
            }
        }
        return (
            [serialTally, concurrentTally],
            {
                let group = DispatchGroup()
                for k in 0..<poolSyncs {
                    group.enter()
                    TKDispatchQueue.global(qos: levels[k % levels.count].1).async {
                        run("pool item")
                        group.leave()
                    }
                }
                _ = parallel(producers) { _ in run("producer thread") }
                group.wait()
            }
        )
    }

    // MARK: Barriers on a concurrent queue

    static func barriers(_ progress: StressProgress) -> Workload {
        let tally = StressTally("barriers on a concurrent queue", progress)
        let q = TKDispatchQueue(label: "stress-barriers", attributes: .concurrent)
        let running = Atomic<Int>(0)
        let barrierRunning = Atomic<Bool>(false)
        let completed = Atomic<Int>(0)
        let blocks = 2_000
        return (
            [tally],
            {
                completed.store(0, ordering: .releasing)
                let group = DispatchGroup()
                @Sendable func barrier(_ index: Int) {
                    if running.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue != 1 {
                        tally.fail("barrier \(index) started while another block ran")
                    }
                    barrierRunning.store(true, ordering: .releasing)
                    let done = completed.load(ordering: .acquiring)
                    if done != index { tally.outOfOrder("barrier \(index) started when \(done) blocks ahead of it had finished") }
                    spin(500)
                    if running.load(ordering: .acquiring) != 1 { tally.fail("a block started while barrier \(index) ran") }
                    barrierRunning.store(false, ordering: .releasing)
                    running.wrappingSubtract(1, ordering: .acquiringAndReleasing)
                    completed.wrappingAdd(1, ordering: .acquiringAndReleasing)
                    tally.ran()
                }
                tally.expect(blocks)
                for i in 0..<blocks {
                    if i % 200 == 199 {
                        q.sync(flags: .barrier) { barrier(i) }
                    } else if i % 25 == 24 {
                        group.enter()
                        q.async(flags: .barrier) {
                            barrier(i)
                            group.leave()
                        }
                    } else {
                        group.enter()
                        q.async {
                            running.wrappingAdd(1, ordering: .acquiringAndReleasing)
                            if barrierRunning.load(ordering: .acquiring) { tally.fail("block \(i) started while a barrier ran") }
                            spin(100)
                            running.wrappingSubtract(1, ordering: .acquiringAndReleasing)
                            completed.wrappingAdd(1, ordering: .acquiringAndReleasing)
                            tally.ran()
                            group.leave()
                        }
                    }
                }
                group.wait()
            }
        )
    }

    // MARK: TKOperationQueue with dependencies

    final class OperationMark: Sendable {
        let finished = Atomic<Bool>(false)
    }

    static func operations(_ progress: StressProgress) -> Workload {
        let tally = StressTally("TKOperationQueue with dependencies", progress)
        let queue = TKOperationQueue()
        let chains = 40
        let length = 10
        return (
            [tally],
            {
                let group = DispatchGroup()
                var operations: [TKOperation] = []
                var lasts: [(TKOperation, OperationMark)] = []
                func make(_ name: String, after deps: [(TKOperation, OperationMark)]) -> (TKOperation, OperationMark) {
                    let mark = OperationMark()
                    let depMarks = deps.map(\.1)
                    let op = TKBlockOperation {
                        if !depMarks.allSatisfy({ $0.finished.load(ordering: .acquiring) }) {
                            tally.outOfOrder("\(name) started before a dependency finished")
                        }
                        mark.finished.store(true, ordering: .releasing)
                        tally.ran()
                        group.leave()
                    }
                    for (dep, _) in deps { try? op.addDependency(dep) }
                    operations.append(op)
                    return (op, mark)
                }
                for c in 0..<chains {
                    var previous: (TKOperation, OperationMark)? = nil
                    for k in 0..<length { previous = make("chain \(c) operation \(k)", after: previous.map { [$0] } ?? []) }
                    lasts.append(previous!)
                }
                _ = make("fan-in", after: lasts)
                tally.expect(operations.count)
                for _ in operations { group.enter() }
                // Added last first, so the queue holds each operation until its dependencies finish.
                queue.addOperations(operations.reversed(), waitUntilFinished: false)
                group.wait()
            }
        )
    }

    // MARK: Blocked workers

    static func blockedWorkers(_ perKind: Int, _ progress: StressProgress) -> Workload {
        let semaphoreTally = StressTally("items waiting on a later item (semaphore)", progress)
        let readTally = StressTally("items blocked in read(2) on a later write", progress)
        return (
            [semaphoreTally, readTally],
            {
                var fds: [Int32] = [0, 0]
                guard pipe(&fds) == 0 else {
                    readTally.fail("pipe() failed: errno \(errno)")
                    return
                }
                let (r, w) = (fds[0], fds[1])
                let semaphore = TKDispatchSemaphore(value: 0)
                let group = DispatchGroup()
                semaphoreTally.expect(perKind + 1) // the waiters and the releasing item
                readTally.expect(perKind)
                for k in 0..<perKind {
                    group.enter()
                    TKDispatchQueue.global(qos: levels[1 + k % 4].1).async {
                        semaphore.wait()
                        semaphoreTally.ran()
                        group.leave()
                    }
                    group.enter()
                    TKDispatchQueue.global(qos: levels[1 + k % 4].1).async {
                        var byte: UInt8 = 0
                        let n = read(r, &byte, 1)
                        if n != 1 { readTally.fail("read(2) returned \(n)") }
                        readTally.ran()
                        group.leave()
                    }
                }
                group.enter()
                TKDispatchQueue.global().async {
                    let bytes = [UInt8](repeating: 1, count: perKind)
                    if write(w, bytes, perKind) != perKind { readTally.fail("write(2) failed: errno \(errno)") }
                    for _ in 0..<perKind { semaphore.signal() }
                    semaphoreTally.ran()
                    group.leave()
                }
                group.wait()
                close(r)
                close(w)
            }
        )
    }
}

// MARK: The watchdog

/// Watches StressProgress from its own Foundation thread; on a stall prints the pool's state and
/// every thread's stack and exits. `stop` and `longestGap` are called from the main thread.
final class Watchdog: @unchecked Sendable {
    let progress: StressProgress
    let tallies: [StressTally]
    let startTime: UInt64
    private let stopped = Atomic<Bool>(false)
    private let longestGapNanoseconds = Atomic<UInt64>(0)
    static let stallLimit: UInt64 = 5_000_000_000

    init(progress: StressProgress, tallies: [StressTally], start: UInt64) {
        (self.progress, self.tallies, self.startTime) = (progress, tallies, start)
    }

    var longestGap: Double { Double(longestGapNanoseconds.load(ordering: .relaxed)) / 1e9 }

    func stop() { stopped.store(true, ordering: .relaxed) }

    func start() {
        let thread = Thread { self.watch() }
        thread.name = "stress-watchdog"
        thread.start()
    }

    private func watch() {
        var last = progress.completed.load(ordering: .relaxed)
        var lastChange = now()
        var lastReport = now()
        while !stopped.load(ordering: .relaxed) {
            usleep(100_000)
            let completed = progress.completed.load(ordering: .relaxed)
            let t = now()
            if completed != last {
                last = completed
                lastChange = t
            } else if progress.outstanding > 0 {
                let gap = t - lastChange
                if gap > longestGapNanoseconds.load(ordering: .relaxed) { longestGapNanoseconds.store(gap, ordering: .relaxed) }
                if gap > Watchdog.stallLimit, !stopped.load(ordering: .relaxed) { stall(gap) }
            } else {
                lastChange = t
            }
            if t - lastReport >= 10_000_000_000 {
                lastReport = t
                print(
                    String(
                        format: "stress: %.0f s, %d items completed, %d outstanding", Double(t - startTime) / 1e9,
                        completed, progress.outstanding))
                fflush(nil)
            }
        }
    }

    private func stall(_ gap: UInt64) -> Never {
        print(
            String(
                format: "\nstress: WEDGED: no item completed for %.1f s with %d items outstanding", Double(gap) / 1e9,
                progress.outstanding))
        for t in tallies where t.outstanding != 0 { print("  \(t.name): \(t.outstanding) outstanding") }
        print("\n--- TKPoolIntrospection.stateDescription() ---")
        fflush(nil)
        // It takes the pool lock: a helper thread, so a lock held forever cannot stop the report.
        // The box is written before the signal and read only after a successful wait.
        final class Box: @unchecked Sendable { var text = "" }
        let described = DispatchSemaphore(value: 0)
        let box = Box()
        Thread {
            box.text = TKPoolIntrospection.stateDescription()
            described.signal()
        }.start()
        if described.wait(timeout: .now() + 2) == .timedOut {
            print("(did not return within 2 s: the pool lock is held)")
        } else {
            print(box.text)
        }
        print("--- threads (/proc/self/task: tid, state, wchan, comm) ---")
        print(Watchdog.procThreads())
        fflush(nil)
        Watchdog.gdbBacktraces()
        print("stress: exiting with status 3 (wedged)")
        fflush(nil)
        _exit(3)
    }

    /// One line per thread of this process from /proc/self/task.
    static func procThreads() -> String {
        func read(_ path: String) -> String {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let tids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap(Int.init).sorted()
        return tids.map { tid in
            let base = "/proc/self/task/\(tid)"
            let stat = read("\(base)/stat")
            // The state is the first field after the parenthesized command name.
            let state = stat.range(of: ") ", options: .backwards).map { String(stat[$0.upperBound...].prefix(1)) } ?? "?"
            return "  \(tid) \(state) wchan=\(read("\(base)/wchan")) \(read("\(base)/comm"))"
        }.joined(separator: "\n")
    }

    /// `gdb -p PID -batch -ex "thread apply all bt"`, output to our stdout, when gdb is on PATH
    /// (killed after 60 s). Yama's ptrace_scope 1 lets only ancestors attach: PR_SET_PTRACER_ANY
    /// first (prctl is variadic, so reached through dlsym).
    static func gdbBacktraces() {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        let path = directories.map { String($0) + "/gdb" }.first { (candidate: String) in access(candidate, X_OK) == 0 }
        guard let gdb = path else {
            print("--- no gdb on PATH: no stacks ---")
            return
        }
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        if let p = dlsym(nil, "prctl") {
            _ = unsafeBitCast(p, to: Prctl.self)(0x5961_6d61, UInt.max, 0, 0, 0) // PR_SET_PTRACER, ANY
        }
        print("--- \(gdb) -p \(getpid()) -batch -ex \"thread apply all bt\" ---")
        fflush(nil)
        let argv = [gdb, "-p", "\(getpid())", "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt"]
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        // gdb's stderr to a file, printed afterwards without its "During symbol reading" lines (a
        // debug build's split DWARF makes thousands).
        let errors = "\(NSTemporaryDirectory())tkbench-stress-gdb-\(getpid()).err"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer {
            let text = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            let kept = text.split(separator: "\n").filter { !$0.hasPrefix("During symbol reading") }
            if !kept.isEmpty { print("--- gdb's stderr ---\n" + kept.joined(separator: "\n")) }
            unlink(errors)
        }
        var pid: pid_t = 0
        guard posix_spawn(&pid, gdb, &actions, nil, &cArgs, environ) == 0 else {
            print("(posix_spawn of gdb failed)")
            return
        }
        var status: Int32 = 0
        let limit = now() + 60_000_000_000
        while waitpid(pid, &status, WNOHANG) == 0 {
            if now() > limit {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                print("(gdb killed after 60 s)")
                break
            }
            usleep(100_000)
        }
    }
}
