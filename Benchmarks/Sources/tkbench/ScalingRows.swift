// ScalingRows: the `scaling` group's child process (`tkbench scaling-child CPUS FILE ROUNDS`),
// already pinned to CPUS CPUs by the driver (Scaling.swift). Runs every row, ours and the
// incumbent interleaved through the Harness where a row is a time per operation, and writes one
// ScalingResult line per side to FILE. The libdispatch test programs' shapes (25,000 timers, the
// cascade, contended sync, readsync) and the blocked-read row run each side once or a few times,
// one after the other. Around every measurement it reads the counters (CounterSample: getrusage's
// context switches, ThreadKit's futex calls and, for ours, the pool lock's acquisitions through
// `TKPoolIntrospection`) and reports them per 1,000 items with each side's figure. Driver thread
// only, except where a row starts its own threads; CounterTotals is touched by the driver only.
import Foundation
import Glibc
import NIOCore
import NIOPosix
import Synchronization
@_spi(Benchmarks) import ThreadKit

/// The process-wide counters at one instant. Context switches are the whole process's (every
/// thread: the side measured, and whatever the idle side's threads do meanwhile, which is little);
/// futex calls are ThreadKit's only; `poolLock` is read only for our side (reading it takes the
/// lock once, which `CounterTotals.measure` subtracts).
struct CounterSample {
    let contextSwitches: Int
    let futexWaits: Int
    let futexWakes: Int
    let poolLock: Int

    static func take(ours: Bool) -> CounterSample {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return CounterSample(
            contextSwitches: usage.ru_nvcsw + usage.ru_nivcsw,
            futexWaits: TKPoolIntrospection.futexWaitCalls, futexWakes: TKPoolIntrospection.futexWakeCalls,
            poolLock: ours ? TKPoolIntrospection.poolLockAcquisitions : 0)
    }
}

/// One side's counters summed over its measurements (warm-up included), and the items they ran.
final class CounterTotals {
    let ours: Bool
    private var contextSwitches = 0, futexWaits = 0, futexWakes = 0, poolLock = 0, items = 0
    init(ours: Bool) { self.ours = ours }

    /// Runs `body` (which runs `items` items) between two samples.
    func measure<T>(items: Int, _ body: () -> T) -> T {
        let before = CounterSample.take(ours: ours)
        let result = body()
        let after = CounterSample.take(ours: ours)
        contextSwitches += after.contextSwitches - before.contextSwitches
        futexWaits += after.futexWaits - before.futexWaits
        futexWakes += after.futexWakes - before.futexWakes
        if ours { poolLock += after.poolLock - before.poolLock - 1 } // less the `before` read's own
        self.items += items
        return result
    }

    /// Per 1,000 items; the incumbents' futex calls and pool lock are not countable (nil).
    var perThousand: ScalingCounters? {
        guard items > 0 else { return nil }
        let k = 1_000 / Double(items)
        return ScalingCounters(
            contextSwitches: Double(contextSwitches) * k,
            futexWaits: ours ? Double(futexWaits) * k : nil, futexWakes: ours ? Double(futexWakes) * k : nil,
            poolLock: ours ? Double(poolLock) * k : nil)
    }
}

enum ScalingRows {
    static func child(cpus: Int, file: String, rounds: Int) -> Int32 {
        var out: [String] = []
        func emit(
            _ row: String, _ side: String, _ contender: String, _ value: Double, _ unit: String, _ target: String,
            _ counters: ScalingCounters? = nil
        ) {
            let r = ScalingResult(
                row: row, cpus: cpus, side: side, contender: contender, value: value, unit: unit, target: target,
                counters: counters)
            out.append(r.line)
            print(
                "  \(cpus) CPU | \(row) | \(contender) | \(Scaling.format(value, unit))"
                    + (counters.map { " | per 1,000 items: \($0.summary)" } ?? ""))
            fflush(nil)
            try? (out.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        }
        let harness = Harness(rounds: rounds)
        // TKBENCH_ONLY=text runs only the rows whose name contains it (for profiling one row).
        let only = ProcessInfo.processInfo.environment["TKBENCH_ONLY"]
        // Several alternatives may be given, separated by "|".
        func wants(_ name: String) -> Bool { only.map { $0.split(separator: "|").contains { name.contains($0) } } ?? true }
        /// A time-per-operation row: ours is contender 0, theirs the reference. An operation runs
        /// `itemsPerOperation` items (the counters' denominator).
        func timeRow(
            _ name: String, _ row: @autoclosure () -> Row, throughput: Bool, unit: String = "ns", target: String,
            itemsPerOperation: Int = 1
        ) {
            guard wants(name) else { return }
            let plain = row()
            let theirs = plain.contenders.firstIndex { $0.name == plain.reference } ?? 1
            // Every measurement of ours and theirs between two counter samples.
            let totals = plain.contenders.indices.map { $0 == 0 || $0 == theirs ? CounterTotals(ours: $0 == 0) : nil }
            let counted = plain.contenders.enumerated().map { i, c in
                guard let total = totals[i] else { return c }
                return Contender(name: c.name) { n in total.measure(items: n * itemsPerOperation) { c.measure(n) } }
            }
            let row = Row(
                group: plain.group, name: plain.name, operations: plain.operations, unit: plain.unit, contenders: counted,
                reference: plain.reference, target: plain.target)
            let medians = harness.medians(row)
            for (side, i) in [("ours", 0), ("theirs", theirs)] {
                let ns = medians[i]
                let value = throughput ? 1e3 / ns : (unit == "µs" ? ns / 1e3 : ns)
                emit(name, side, row.contenders[i].name, value, throughput ? "M/s" : unit, target, totals[i]?.perThousand)
            }
        }
        timeRow("global async, 1 producer", DispatchBenchmarks.globalAsync(), throughput: true, target: "≥ 2× libdispatch")
        timeRow("global async, N producers", globalAsyncProducers(cpus), throughput: true, target: "≥ 2× libdispatch; 16 CPUs ≥ 4× 2 CPUs")
        timeRow("blocks across 1,000 serial queues", DispatchBenchmarks.manyQueues(), throughput: true, target: "≥ 2× libdispatch")
        timeRow("queue ping-pong (per hop)", DispatchBenchmarks.hop(), throughput: false, target: "≤ 0.8× libdispatch")
        timeRow("concurrentPerform", DispatchBenchmarks.concurrentPerform(), throughput: true, target: "≥ 1× libdispatch")
        timeRow(
            "interactive behind background (start latency, median)", DispatchBenchmarks.interactiveBehindBackground(), throughput: false,
            unit: "µs", target: "≤ 1.0× libdispatch",
            itemsPerOperation: 201) // a sample: 200 background items and the interactive one
        timeRow("TKOperationQueue throughput", operationThroughput(), throughput: true, target: "≥ 1× OperationQueue")
        timeRow("port messages into a loop, 1 sender", PortBenchmarks.inProcessMessages(), throughput: true, target: "≥ 1.0× NIO execute")
        timeRow(
            "port messages into a loop, N senders", portMessagesFromSenders(cpus), throughput: true,
            target: "≥ 1.0× NIO execute; 16 CPUs ≥ 4× 2 CPUs")
        timeRow("uncontended recursive lock+unlock", recursiveLock(), throughput: false, target: "≤ 0.6× NSRecursiveLock")
        timeRow("uncontended synchronized(token)", synchronizedToken(), throughput: false, target: "one atomic to lock (no ratio target)")
        let programs = ScalingPrograms(rounds: max(1, min(3, rounds)))
        if wants("25,000 timers") { programs.timers(emit) }
        if wants("cascade") { programs.cascade(emit) }
        if wants("contended sync") { programs.contendedSync(emit) }
        if wants("readsync") { programs.readsync(cpus: cpus, emit) }
        if wants("blocked in read") { programs.blockedReads(emit) }
        return 0
    }

    /// N producer threads (N = the CPU count) each submitting n/N empty blocks to the global queue;
    /// timed until every block has run.
    static func globalAsyncProducers(_ producers: Int) -> Row {
        Row(
            group: "scaling", name: "global async, N producers", operations: 200_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKDispatchQueue.global()") { n in
                    let group = TKDispatchGroup()
                    let q = TKDispatchQueue.global()
                    return parallel(producers) { _ in
                        for _ in 0..<(n / producers) { q.async(group: group) {} }
                        group.wait()
                    }
                },
                Contender(name: "DispatchQueue.global()") { n in
                    let group = DispatchGroup()
                    let q = DispatchQueue.global()
                    return parallel(producers) { _ in
                        for _ in 0..<(n / producers) { q.async(group: group) {} }
                        group.wait()
                    }
                },
            ], reference: "DispatchQueue.global()", target: "")
    }

    /// Empty block operations with the default concurrency (the pool's width), until all finished.
    static func operationThroughput() -> Row {
        Row(
            group: "scaling", name: "TKOperationQueue throughput", operations: 100_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKOperationQueue") { n in
                    let q = TKOperationQueue()
                    return timed {
                        for _ in 0..<n { q.addOperation {} }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
                Contender(name: "OperationQueue") { n in
                    let q = OperationQueue()
                    return timed {
                        for _ in 0..<n { q.addOperation {} }
                        q.waitUntilAllOperationsAreFinished()
                    }
                },
            ], reference: "OperationQueue", target: "")
    }

    /// N sender threads each sending n/N port messages into one loop, against N threads each
    /// calling `execute` n/N times on one NIO event loop; timed until the loop handled the last.
    static func portMessagesFromSenders(_ senders: Int) -> Row {
        let (port, delegate) = PortBenchmarks.portOnLoop()
        let nio = RunLoopBenchmarks.group.next()
        return Row(
            group: "scaling", name: "port messages, N senders", operations: 400_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKMessagePort") { n in
                    let each = n / senders
                    delegate.expect(each * senders)
                    let start = now()
                    _ = parallel(senders) { _ in
                        for i in 0..<each {
                            let message = TKPortMessage(sendPort: port, receivePort: nil, components: [])
                            message.msgid = UInt32(truncatingIfNeeded: i)
                            _ = message.send(before: .now + .seconds(60))
                        }
                    }
                    delegate.done.wait()
                    return Double(now() - start) * Double(n) / Double(max(1, each * senders))
                },
                Contender(name: "NIO EventLoop.execute") { n in
                    let each = n / senders
                    let done = DispatchSemaphore(value: 0)
                    let ran = Counter() // touched only on the event loop
                    let total = each * senders
                    let start = now()
                    _ = parallel(senders) { _ in
                        for _ in 0..<each {
                            nio.execute {
                                ran.value += 1
                                if ran.value == total { done.signal() }
                            }
                        }
                    }
                    done.wait()
                    return Double(now() - start) * Double(n) / Double(max(1, total))
                },
            ], reference: "NIO EventLoop.execute", target: "")
    }

    static func recursiveLock() -> Row {
        let tk = TKRecursiveLock()
        let ns = NSRecursiveLock()
        return Row(
            group: "scaling", name: "uncontended recursive lock+unlock", operations: 2_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKRecursiveLock") { n in
                    timed {
                        for _ in 0..<n {
                            tk.lock()
                            tk.unlock()
                        }
                    }
                },
                Contender(name: "NSRecursiveLock") { n in
                    timed {
                        for _ in 0..<n {
                            ns.lock()
                            ns.unlock()
                        }
                    }
                },
            ], reference: "NSRecursiveLock", target: "")
    }

    static func synchronizedToken() -> Row {
        let token = NSObject()
        let ns = NSRecursiveLock()
        return Row(
            group: "scaling", name: "uncontended synchronized(token)", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "synchronized(token)") { n in timed { for _ in 0..<n { synchronized(token) { blackHole(0) } } } },
                Contender(name: "NSRecursiveLock") { n in
                    timed {
                        for _ in 0..<n {
                            ns.lock()
                            blackHole(0)
                            ns.unlock()
                        }
                    }
                },
            ], reference: "NSRecursiveLock", target: "")
    }
}
