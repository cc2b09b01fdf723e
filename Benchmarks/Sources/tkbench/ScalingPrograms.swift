// ScalingPrograms: the libdispatch test programs' shapes as rows of the `scaling` group, each side
// run `rounds` times alternately (ours, theirs, ours, …) and the median kept:
//   - 25,000 timer sources with a 5 µs interval, handlers on one serial queue: callbacks per
//     second over 0.5 s (dispatch_timer's shape);
//   - cascade: 80 serial queues, 10,000 blocks each hopping to the next queue, 200,000 hops in
//     all (dispatch_cascade.c): wall time;
//   - contended sync: a 10 ms barrier on a concurrent queue with 8 threads syncing 10 ms blocks
//     behind it (the test's 50 ms shortened): wall time, ideal 20 ms when the 8 run side by side;
//   - readsync (dispatch_readsync.c, scaled down): CPUS × 8 workers on the high global queue each
//     doing reader syncs on a concurrent queue with a barrier writer every 100 and a barrier sync
//     drain every 1,000, 2,000 reads in all, readers and writers sleeping 1 ms: wall time;
//   - 8 items blocked in read(2) on a pipe and a ninth that writes the 8 bytes, all on the global
//     queue: wall time and the process's peak thread count (a pool that does not notice workers
//     blocked outside it never starts the ninth; the driver writes the bytes itself after 5 s).
// Each side's counters per 1,000 items (ScalingRows' CounterTotals) go with its figure where a run
// has a fixed number of items (every shape but the timers). Driver thread only.
import Foundation
import Glibc
import Synchronization
import ThreadKit

struct ScalingPrograms {
    let rounds: Int
    /// Row, side, contender, value, unit, target, counters per 1,000 items (nil: none).
    typealias Emit = (String, String, String, Double, String, String, ScalingCounters?) -> Void

    /// Runs `ours` and `theirs` alternately `rounds` times; the medians, and each side's counters
    /// per 1,000 items when a run has a fixed number of `items` (ScalingRows' CounterTotals).
    private func alternate(items: Int? = nil, _ ours: () -> Double, _ theirs: () -> Double)
        -> (Double, Double, ScalingCounters?, ScalingCounters?)
    {
        var a: [Double] = []
        var b: [Double] = []
        let ourTotals = CounterTotals(ours: true)
        let theirTotals = CounterTotals(ours: false)
        for _ in 0..<rounds {
            a.append(ourTotals.measure(items: items ?? 0, ours))
            b.append(theirTotals.measure(items: items ?? 0, theirs))
        }
        return (a.sorted()[a.count / 2], b.sorted()[b.count / 2], ourTotals.perThousand, theirTotals.perThousand)
    }

    // MARK: 25,000 timers

    func timers(_ emit: Emit) {
        let count = 25_000
        let window = 0.5
        /// One side: `start(i, handler)` makes, schedules and starts timer i and returns its
        /// cancel; `read` reads the count on the handlers' queue.
        func shape(_ start: (Int, @escaping @Sendable () -> Void) -> () -> Void, _ read: (() -> Int) -> Int, _ fired: Counter) -> Double {
            let cancels = (0..<count).map { i in start(i) { fired.value += 1 } }
            let before = read { fired.value }
            usleep(UInt32(window * 1e6))
            let after = read { fired.value }
            cancels.forEach { $0() }
            _ = read { 0 }
            return Double(after - before) / window / 1e6
        }
        let (ours, theirs, _, _) = alternate(
            {
                let q = TKDispatchQueue(label: "timers")
                let fired = Counter() // fired: touched only on q
                return shape(
                    { _, handler in
                        let s = TKDispatchSource.makeTimerSource(queue: q)
                        s.schedule(deadline: .now, repeating: .microseconds(5))
                        s.setEventHandler(handler)
                        s.activate()
                        return { s.cancel() }
                    }, { q.sync(execute: $0) }, fired)
            },
            {
                let q = DispatchQueue(label: "timers")
                let fired = Counter()
                return shape(
                    { _, handler in
                        let s = DispatchSource.makeTimerSource(queue: q)
                        s.schedule(deadline: .now(), repeating: .microseconds(5))
                        s.setEventHandler(handler: handler)
                        s.resume()
                        return { s.cancel() }
                    }, { q.sync(execute: $0) }, fired)
            })
        emit("25,000 timers at 5 µs, one queue (callbacks)", "ours", "TKDispatchSource", ours, "M/s", "≥ 1× libdispatch", nil)
        emit("25,000 timers at 5 µs, one queue (callbacks)", "theirs", "DispatchSource", theirs, "M/s", "≥ 1× libdispatch", nil)
    }

    // MARK: Cascade

    /// One side of the cascade: `submit(i, block)` runs `block` on serial queue i.
    private static func cascadeShape(
        _ queueCount: Int, _ blocks: Int,
        _ submit: @escaping @Sendable (Int, @escaping @Sendable () -> Void) -> Void
    ) -> Double {
        let remaining = Atomic<Int>(queueCount * blocks / 4)
        let done = DispatchSemaphore(value: 0)
        @Sendable func step(_ index: Int) {
            if remaining.load(ordering: .relaxed) <= 0 { return }
            if index + 1 < queueCount { submit(index + 1) { step(index + 1) } }
            if remaining.wrappingSubtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
        }
        return timed {
            for _ in 0..<blocks { step(0) }
            done.wait()
        } / 1e6
    }

    func cascade(_ emit: Emit) {
        let queueCount = 80
        let blocks = 10_000
        let (ours, theirs, ourCounters, theirCounters) = alternate(
            items: queueCount * blocks / 4,
            {
                let queues = (0..<queueCount).map { TKDispatchQueue(label: "cascade\($0)") }
                return ScalingPrograms.cascadeShape(queueCount, blocks) { queues[$0].async(execute: $1) }
            },
            {
                let queues = (0..<queueCount).map { DispatchQueue(label: "cascade\($0)") }
                return ScalingPrograms.cascadeShape(queueCount, blocks) { queues[$0].async(execute: $1) }
            })
        emit("cascade: 80 queues, 10,000 blocks (wall)", "ours", "TKDispatchQueue", ours, "ms", "≤ 1× libdispatch", ourCounters)
        emit("cascade: 80 queues, 10,000 blocks (wall)", "theirs", "DispatchQueue", theirs, "ms", "≤ 1× libdispatch", theirCounters)
    }

    // MARK: Contended sync

    func contendedSync(_ emit: Emit) {
        let blockMicros: UInt32 = 10_000
        /// One side: `barrier` submits the barrier, `sync` runs a block through sync.
        func shape(_ barrier: (@escaping @Sendable () -> Void) -> Void, _ sync: @escaping @Sendable (() -> Void) -> Void) -> Double {
            timed {
                barrier { _ = usleep(blockMicros) }
                _ = parallel(8) { _ in sync { _ = usleep(blockMicros) } }
            } / 1e6
        }
        let (ours, theirs, ourCounters, theirCounters) = alternate(
            items: 9,
            {
                let q = TKDispatchQueue(label: "contended", attributes: .concurrent)
                return shape({ q.async(flags: .barrier, execute: $0) }, { q.sync(execute: $0) })
            },
            {
                let q = DispatchQueue(label: "contended", attributes: .concurrent)
                return shape({ q.async(flags: .barrier, execute: $0) }, { q.sync(execute: $0) })
            })
        emit(
            "contended sync: 8 threads behind a barrier, 10 ms blocks (wall)", "ours", "TKDispatchQueue", ours, "ms",
            "≤ 1× libdispatch (ideal 20 ms)", ourCounters)
        emit(
            "contended sync: 8 threads behind a barrier, 10 ms blocks (wall)", "theirs", "DispatchQueue", theirs, "ms",
            "≤ 1× libdispatch (ideal 20 ms)", theirCounters)
    }

    // MARK: Readsync

    /// One side of readsync: `submit` starts a worker body on the high global queue; `read` and
    /// `write` and `drain` are the side's sync, barrier async and barrier sync on the queue.
    private static func readsyncShape(
        workers n: Int, submit: (@escaping @Sendable () -> Void) -> Void,
        read: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void,
        write: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void,
        drain: @escaping @Sendable () -> Void
    ) -> Double {
        let laps = 1_000
        let interval = 100
        let started = Atomic<Int>(0)
        let count = Atomic<Int>(0)
        let draining = Atomic<Int>(0)
        let finished = DispatchSemaphore(value: 0)
        @Sendable func busy() {
            var x = 0
            for i in 0..<10_000 { x &+= i }
            blackHole(x)
        }
        return timed {
            for _ in 0..<n {
                submit {
                    started.wrappingAdd(1, ordering: .relaxed)
                    // Wait (at most 2 s) until every worker runs: the program needs n threads.
                    let deadline = now() + 2_000_000_000
                    while started.load(ordering: .relaxed) < n && now() < deadline { usleep(1_000) }
                    while true {
                        let index = count.wrappingAdd(1, ordering: .relaxed).newValue
                        if index > laps { break }
                        read {
                            usleep(1_000)
                            busy()
                        }
                        if index % interval == 0 {
                            write {
                                usleep(1_000)
                                busy()
                            }
                        }
                        read {
                            usleep(1_000)
                            busy()
                        }
                        if index % (interval * 10) == 0 {
                            draining.wrappingAdd(1, ordering: .relaxed)
                            usleep(1_000)
                            drain()
                            draining.wrappingSubtract(1, ordering: .relaxed)
                        } else {
                            while draining.load(ordering: .relaxed) > 0 { usleep(1_000) }
                        }
                    }
                    finished.signal()
                }
            }
            for _ in 0..<n { finished.wait() }
        } / 1e6
    }

    func readsync(cpus: Int, _ emit: Emit) {
        let n = cpus * 8
        // Items: the 2,000 reads, 10 barrier writes and 1 barrier drain on the queue, and the n workers.
        let (ours, theirs, ourCounters, theirCounters) = alternate(
            items: 2_011 + n,
            {
                let q = TKDispatchQueue(label: "readsync", attributes: .concurrent)
                return ScalingPrograms.readsyncShape(
                    workers: n,
                    submit: { TKDispatchQueue.global(qos: .userInitiated).async(execute: $0) },
                    read: { q.sync(execute: $0) },
                    write: { q.async(flags: .barrier, execute: $0) },
                    drain: { q.sync(flags: .barrier) {} })
            },
            {
                let q = DispatchQueue(label: "readsync", attributes: .concurrent)
                return ScalingPrograms.readsyncShape(
                    workers: n,
                    submit: { DispatchQueue.global(qos: .userInitiated).async(execute: $0) },
                    read: { q.sync(execute: $0) },
                    write: { q.async(flags: .barrier, execute: $0) },
                    drain: { q.sync(flags: .barrier) {} })
            })
        let row = "readsync: CPUS×8 workers, 2,000 reads (wall)"
        emit(row, "ours", "TKDispatchQueue", ours, "ms", "≤ 1× libdispatch", ourCounters)
        emit(row, "theirs", "DispatchQueue", theirs, "ms", "≤ 1× libdispatch", theirCounters)
    }

    // MARK: 8 items blocked in read(2)

    private static func blockedReads(_ submit: (@escaping @Sendable () -> Void) -> Void) -> (Double, Int) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return (-1, -1) }
        let (r, w) = (fds[0], fds[1])
        let done = DispatchSemaphore(value: 0)
        let wrote = Atomic<Bool>(false)
        let peak = Atomic<Int>(0)
        let watching = Atomic<Bool>(true)
        let watcher = Thread {
            while watching.load(ordering: .relaxed) {
                let n = DispatchBenchmarks.threadCount()
                if n > peak.load(ordering: .relaxed) { peak.store(n, ordering: .relaxed) }
                usleep(2_000)
            }
        }
        watcher.start()
        let base = DispatchBenchmarks.threadCount()
        let start = now()
        for _ in 0..<8 {
            submit {
                var byte: UInt8 = 0
                _ = read(r, &byte, 1)
                done.signal()
            }
        }
        submit {
            if !wrote.exchange(true, ordering: .relaxed) {
                var bytes = [UInt8](repeating: 1, count: 8)
                _ = write(w, &bytes, 8)
            }
            done.signal()
        }
        var waited = 0
        for _ in 0..<9 {
            while done.wait(timeout: .now() + 0.1) == .timedOut {
                waited += 1
                if waited == 50, !wrote.exchange(true, ordering: .relaxed) { // 5 s: unblock them ourselves
                    var bytes = [UInt8](repeating: 1, count: 8)
                    _ = write(w, &bytes, 8)
                }
            }
        }
        let elapsed = Double(now() - start) / 1e6
        watching.store(false, ordering: .relaxed)
        close(r)
        close(w)
        return (elapsed, max(0, peak.load(ordering: .relaxed) - base))
    }

    func blockedReads(_ emit: Emit) {
        let ourTotals = CounterTotals(ours: true)
        let theirTotals = CounterTotals(ours: false)
        let ours = ourTotals.measure(items: 9) { ScalingPrograms.blockedReads { TKDispatchQueue.global().async(execute: $0) } }
        let theirs = theirTotals.measure(items: 9) { ScalingPrograms.blockedReads { DispatchQueue.global().async(execute: $0) } }
        let row = "8 items blocked in read(2) + 1 writer"
        emit(row, "ours", "TKDispatchQueue", ours.0, "ms", "≈ libdispatch (no 5 s stall)", ourTotals.perThousand)
        emit(row, "theirs", "DispatchQueue", theirs.0, "ms", "", theirTotals.perThousand)
        emit(row, "ours", "TKDispatchQueue", Double(ours.1), "threads", "", nil)
        emit(row, "theirs", "DispatchQueue", Double(theirs.1), "threads", "", nil)
    }
}
