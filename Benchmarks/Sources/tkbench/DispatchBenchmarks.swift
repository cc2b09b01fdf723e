// DispatchBenchmarks: TKDispatch against libdispatch (Foundation's Dispatch), in one process,
// interleaved (issue 6's rows):
//   - async of empty blocks to a global queue (throughput, time per block until all ran);
//   - async of empty blocks to one serial queue;
//   - ping-pong between two serial queues (time per hop);
//   - group enter + leave on one thread;
//   - semaphore ping-pong between two threads (round trip);
//   - concurrentPerform of 10^6 trivial iterations (time per iteration);
//   - 10^6 blocks across 1,000 serial queues (time per block);
//   - the latency of an interactive item submitted behind a background flood.
// Then a table that is not a time per operation: 8 items that each block 1 s in a semaphore wait
// (wall time and peak thread count of each side), 8 items blocked in read(2) on a pipe behind which
// a 9th item writes the bytes they wait for (a wait outside ThreadKit: issue 12), and where a
// background item submitted behind an interactive flood starts.
import Foundation
import Synchronization
import ThreadKit

enum DispatchBenchmarks {
    static func rows() -> [Row] {
        [
            globalAsync(), serialAsync(), hop(), groupEnterLeave(), semaphorePingPong(), concurrentPerform(),
            manyQueues(), interactiveBehindBackground(),
        ]
    }

    static func globalAsync() -> Row {
        Row(
            group: "dispatch", name: "async empty blocks to a global queue (per block)", operations: 200_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue.global()") { n in
                    let group = TKDispatchGroup()
                    let q = TKDispatchQueue.global()
                    return timed {
                        for _ in 0..<n { q.async(group: group) {} }
                        group.wait()
                    }
                },
                Contender(name: "DispatchQueue.global()") { n in
                    let group = DispatchGroup()
                    let q = DispatchQueue.global()
                    return timed {
                        for _ in 0..<n { q.async(group: group) {} }
                        group.wait()
                    }
                },
            ], reference: "DispatchQueue.global()", target: "≤ 0.5× (2× throughput)")
    }

    static func serialAsync() -> Row {
        Row(
            group: "dispatch", name: "async empty blocks to one serial queue (per block)", operations: 200_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue serial") { n in
                    let q = TKDispatchQueue(label: "bench-serial")
                    return timed {
                        for _ in 0..<n { q.async {} }
                        q.sync {}
                    }
                },
                Contender(name: "DispatchQueue serial") { n in
                    let q = DispatchQueue(label: "bench-serial")
                    return timed {
                        for _ in 0..<n { q.async {} }
                        q.sync {}
                    }
                },
            ], reference: "DispatchQueue serial", target: "≤ 0.5× (2× throughput)")
    }

    static func hop() -> Row {
        Row(
            group: "dispatch", name: "ping-pong between two serial queues (per hop)", operations: 50_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue") { n in
                    let a = TKDispatchQueue(label: "a")
                    let b = TKDispatchQueue(label: "b")
                    let done = DispatchSemaphore(value: 0)
                    let count = Counter() // touched by one hop at a time
                    @Sendable func step(_ onA: Bool) {
                        count.value += 1
                        if count.value == n {
                            done.signal()
                            return
                        }
                        (onA ? b : a).async { step(!onA) }
                    }
                    return timed {
                        a.async { step(true) }
                        done.wait()
                    }
                },
                Contender(name: "DispatchQueue") { n in
                    let a = DispatchQueue(label: "a")
                    let b = DispatchQueue(label: "b")
                    let done = DispatchSemaphore(value: 0)
                    let count = Counter()
                    @Sendable func step(_ onA: Bool) {
                        count.value += 1
                        if count.value == n {
                            done.signal()
                            return
                        }
                        (onA ? b : a).async { step(!onA) }
                    }
                    return timed {
                        a.async { step(true) }
                        done.wait()
                    }
                },
            ], reference: "DispatchQueue", target: "≤ 0.8×")
    }

    static func groupEnterLeave() -> Row {
        Row(
            group: "dispatch", name: "group enter + leave", operations: 2_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchGroup") { n in
                    let g = TKDispatchGroup()
                    return timed {
                        for _ in 0..<n {
                            g.enter()
                            g.leave()
                        }
                    }
                },
                Contender(name: "DispatchGroup") { n in
                    let g = DispatchGroup()
                    return timed {
                        for _ in 0..<n {
                            g.enter()
                            g.leave()
                        }
                    }
                },
            ], reference: "DispatchGroup", target: "≤ 1.0×")
    }

    static func semaphorePingPong() -> Row {
        Row(
            group: "dispatch", name: "semaphore ping-pong between two threads (round trip)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKDispatchSemaphore") { n in
                    let ping = TKDispatchSemaphore(value: 0)
                    let pong = TKDispatchSemaphore(value: 0)
                    return parallel(2) { me in
                        for _ in 0..<n {
                            if me == 0 {
                                ping.signal()
                                pong.wait()
                            } else {
                                ping.wait()
                                pong.signal()
                            }
                        }
                    }
                },
                Contender(name: "DispatchSemaphore") { n in
                    let ping = DispatchSemaphore(value: 0)
                    let pong = DispatchSemaphore(value: 0)
                    return parallel(2) { me in
                        for _ in 0..<n {
                            if me == 0 {
                                ping.signal()
                                pong.wait()
                            } else {
                                ping.wait()
                                pong.signal()
                            }
                        }
                    }
                },
            ], reference: "DispatchSemaphore", target: "≤ 0.5×")
    }

    static func concurrentPerform() -> Row {
        Row(
            group: "dispatch", name: "concurrentPerform, 10^6 trivial iterations (per iteration)", operations: 1_000_000,
            unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue.concurrentPerform") { n in
                    let sum = Atomic<Int>(0)
                    return timed {
                        TKDispatchQueue.concurrentPerform(iterations: n) { i in
                            if i & 0xFFFF == 0 { sum.wrappingAdd(1, ordering: .relaxed) }
                        }
                    }
                },
                Contender(name: "DispatchQueue.concurrentPerform") { n in
                    let sum = Atomic<Int>(0)
                    return timed {
                        DispatchQueue.concurrentPerform(iterations: n) { i in if i & 0xFFFF == 0 { sum.wrappingAdd(1, ordering: .relaxed) }
                        }
                    }
                },
            ], reference: "DispatchQueue.concurrentPerform", target: "≤ 1.0×")
    }

    static func manyQueues() -> Row {
        Row(
            group: "dispatch", name: "blocks across 1,000 serial queues (per block)", operations: 200_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue ×1000") { n in
                    let queues = (0..<1_000).map { TKDispatchQueue(label: "q\($0)") }
                    let group = TKDispatchGroup()
                    return timed {
                        for i in 0..<n { queues[i % 1_000].async(group: group) {} }
                        group.wait()
                    }
                },
                Contender(name: "DispatchQueue ×1000") { n in
                    let queues = (0..<1_000).map { DispatchQueue(label: "q\($0)") }
                    let group = DispatchGroup()
                    return timed {
                        for i in 0..<n { queues[i % 1_000].async(group: group) {} }
                        group.wait()
                    }
                },
            ], reference: "DispatchQueue ×1000", target: "")
    }

    /// Per operation: the latency from submitting an interactive item behind 200 background items
    /// (each ~50 µs of work) to its start; each round reports the median of its items (returned
    /// as median × n, so the harness's per-operation figure is that median). A mean let one
    /// 1–4 ms scheduling outlier of the 2-core VM, on either side, decide a round.
    static func interactiveBehindBackground() -> Row {
        Row(
            group: "dispatch", name: "interactive item behind a background flood (start latency, median)", operations: 30,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKDispatchQueue") { n in
                    medianTimesCount((0..<n).map { _ in interactiveSample(ours: true) }.map { Double($0.started - $0.submitted) })
                },
                Contender(name: "DispatchQueue") { n in
                    medianTimesCount((0..<n).map { _ in interactiveSample(ours: false) }.map { Double($0.started - $0.submitted) })
                },
            ], reference: "DispatchQueue", target: "≤ 1.0×, fewer threads")
    }

    /// One item of the row above: 200 background items of ~50 µs, then an interactive item; returns
    /// when all have run, with the CLOCK_MONOTONIC instants (ns) at which the interactive item was
    /// submitted and started.
    static func interactiveSample(ours: Bool) -> (submitted: UInt64, started: UInt64) {
        let started = Atomic<UInt64>(0)
        let t0: UInt64
        if ours {
            let group = TKDispatchGroup()
            for _ in 0..<200 { TKDispatchQueue.global(qos: .background).async(group: group) { spin(50) } }
            t0 = now()
            TKDispatchQueue.global(qos: .userInteractive).async(group: group) { started.store(now(), ordering: .relaxed) }
            group.wait()
        } else {
            let group = DispatchGroup()
            for _ in 0..<200 { DispatchQueue.global(qos: .background).async(group: group) { spin(50) } }
            t0 = now()
            DispatchQueue.global(qos: .userInteractive).async(group: group) { started.store(now(), ordering: .relaxed) }
            group.wait()
        }
        return (t0, started.load(ordering: .relaxed))
    }

    /// `tkbench interactive-samples ours|theirs N FILE`: N items of the interactive row for one
    /// side, written to FILE as "submitted started" lines (CLOCK_MONOTONIC ns), so that
    /// Benchmarks/interactive-breakdown.sh can split each latency with `perf sched` events.
    static func interactiveSamples(_ arguments: [String]) -> Int32 {
        guard arguments.count == 3, let n = Int(arguments[1]), ["ours", "theirs"].contains(arguments[0]) else {
            print("usage: tkbench interactive-samples ours|theirs N FILE")
            return 2
        }
        let samples = (0..<n).map { _ in interactiveSample(ours: arguments[0] == "ours") }
        let text = samples.map { "\($0.submitted) \($0.started)\n" }.joined()
        do { try text.write(toFile: arguments[2], atomically: true, encoding: .utf8) } catch {
            print("tkbench: cannot write \(arguments[2]): \(error)")
            return 1
        }
        return 0
    }

    /// The median of `samples` times their count (a row's per-operation figure is then the median).
    static func medianTimesCount(_ samples: [Double]) -> Double {
        samples.sorted()[samples.count / 2] * Double(samples.count)
    }

    @Sendable static func spin(_ microseconds: UInt64) {
        let end = now() + microseconds * 1_000
        while now() < end {}
    }

    // MARK: Not a time per operation

    /// Eight items that each block 1 s in a semaphore wait, submitted at once to a global queue:
    /// wall time and peak thread count; and where a background item submitted behind an
    /// interactive flood starts.
    static func blockingAndPriority() {
        print("| row | contender | result | target |")
        print("|---|---|---|---|")
        // Each side in a fresh process, so neither pool has threads left over from earlier rows.
        let (tkTime, tkPeak) = blockingInChild("tk")
        let (gcdTime, gcdPeak) = blockingInChild("gcd")
        print(
            String(
                format:
                    "| 8 items blocking 1 s each, fresh process (wall time, peak threads of the process) | TKDispatchQueue | %.2f s, %d threads | < 1.5 s |",
                tkTime, tkPeak))
        print(String(format: "| | DispatchQueue | %.2f s, %d threads | |", gcdTime, gcdPeak))
        let (tkReadTime, tkReadPeak) = blockingInChild("tk-read")
        let (gcdReadTime, gcdReadPeak) = blockingInChild("gcd-read")
        print(
            String(
                format:
                    "| 8 items blocked in read(2) on a pipe, a 9th item writes their bytes, fresh process (wall time, peak threads) | TKDispatchQueue | %.3f s, %d threads | < 0.1 s |",
                tkReadTime, tkReadPeak))
        print(String(format: "| | DispatchQueue | %.3f s, %d threads | |", gcdReadTime, gcdReadPeak))
        let tkFlood = backgroundBehindFlood(
            submitFlood: { n, finished in
                for _ in 0..<n {
                    TKDispatchQueue.global(qos: .userInteractive).async {
                        spin(20)
                        finished.value.wrappingAdd(1, ordering: .relaxed)
                    }
                }
            },
            submitBackground: { body in TKDispatchQueue.global(qos: .background).async(execute: body) })
        let gcdFlood = backgroundBehindFlood(
            submitFlood: { n, finished in
                for _ in 0..<n {
                    DispatchQueue.global(qos: .userInteractive).async {
                        spin(20)
                        finished.value.wrappingAdd(1, ordering: .relaxed)
                    }
                }
            },
            submitBackground: { body in DispatchQueue.global(qos: .background).async(execute: body) })
        print(
            "| background item behind 2,000 interactive items (flood items done when it started) | TKDispatchQueue | \(tkFlood) of 2000 | most of them |"
        )
        print("| | DispatchQueue | \(gcdFlood) of 2000 | |")
        print("")
    }

    /// Runs `tkbench blocking-child KIND` and reads "seconds peak" from its output.
    private static func blockingInChild(_ kind: String) -> (Double, Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = ["blocking-child", kind]
        let out = Pipe()
        process.standardOutput = out
        guard (try? process.run()) != nil else { return (-1, -1) }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let fields = String(decoding: data, as: UTF8.self).split(separator: " ")
        guard fields.count == 2, let seconds = Double(fields[0]), let peak = Int(fields[1].trimmingCharacters(in: .whitespacesAndNewlines))
        else { return (-1, -1) }
        return (seconds, peak)
    }

    /// The child side: eight blocking items on one side's global queue; prints "seconds peak".
    static func blockingChild(_ kind: String) -> Int32 {
        if kind.hasSuffix("-read") {
            let (seconds, peak) = blockedInRead(tk: kind == "tk-read")
            print(String(format: "%.3f %d", seconds, peak))
            return 0
        }
        let (seconds, peak) =
            kind == "tk"
            ? blocking { done in
                let s = TKDispatchSemaphore(value: 0)
                for _ in 0..<8 {
                    TKDispatchQueue.global().async {
                        _ = s.wait(until: .now + .seconds(1))
                        done.signal()
                    }
                }
            }
            : blocking { done in
                let s = DispatchSemaphore(value: 0)
                for _ in 0..<8 {
                    DispatchQueue.global().async {
                        _ = s.wait(timeout: .now() + 1)
                        done.signal()
                    }
                }
            }
        print(String(format: "%.3f %d", seconds, peak))
        return 0
    }

    /// Eight items blocked in read(2) on a pipe (invisible to either pool as a wait), then a ninth
    /// that writes the eight bytes they wait for: it starts only if the pool notices the blocked
    /// workers and lets another thread run.
    private static func blockedInRead(tk: Bool) -> (Double, Int) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return (-1, -1) }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        return blocking { done in
            let reader: @Sendable () -> Void = {
                var byte: UInt8 = 0
                _ = read(readEnd, &byte, 1)
                done.signal()
            }
            let writer: @Sendable () -> Void = {
                let bytes = [UInt8](repeating: 1, count: 8)
                _ = bytes.withUnsafeBytes { write(writeEnd, $0.baseAddress, 8) }
            }
            if tk {
                for _ in 0..<8 { TKDispatchQueue.global().async(execute: reader) }
                TKDispatchQueue.global().async(execute: writer)
            } else {
                for _ in 0..<8 { DispatchQueue.global().async(execute: reader) }
                DispatchQueue.global().async(execute: writer)
            }
        }
    }

    /// Wall time and the process's peak thread count (sampled every 5 ms, the sampler excluded).
    private static func blocking(_ submit: (DispatchSemaphore) -> Void) -> (Double, Int) {
        let done = DispatchSemaphore(value: 0)
        let peak = Atomic<Int>(0)
        let watching = Atomic<Bool>(true)
        let watcher = Thread {
            while watching.load(ordering: .relaxed) {
                let n = threadCount()
                if n > peak.load(ordering: .relaxed) { peak.store(n, ordering: .relaxed) }
                usleep(5_000)
            }
        }
        watcher.start()
        let start = now()
        submit(done)
        for _ in 0..<8 { done.wait() }
        let elapsed = Double(now() - start) / 1e9
        watching.store(false, ordering: .relaxed)
        return (elapsed, peak.load(ordering: .relaxed) - 1)
    }

    final class AtomicCount: Sendable { let value = Atomic<Int>(0) }

    private static func backgroundBehindFlood(
        submitFlood: (Int, AtomicCount) -> Void,
        submitBackground: (@escaping @Sendable () -> Void) -> Void
    ) -> Int {
        let finished = AtomicCount()
        let seen = Atomic<Int>(-1)
        submitFlood(2_000, finished)
        submitBackground { seen.store(finished.value.load(ordering: .relaxed), ordering: .relaxed) }
        while seen.load(ordering: .relaxed) < 0 || finished.value.load(ordering: .relaxed) < 2_000 { usleep(1_000) }
        return seen.load(ordering: .relaxed)
    }

    static func threadCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
    }
}
