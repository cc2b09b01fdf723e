// ScalingRows: the `scaling` group's child process (`tkbench scaling-child CPUS FILE ROUNDS`),
// already pinned to CPUS CPUs by the driver (Scaling.swift). Runs every row, ours and the
// incumbent interleaved through the Harness where a row is a time per operation, and writes one
// ScalingResult line per side to FILE. The libdispatch test programs' shapes (25,000 timers, the
// cascade, contended sync, readsync) and the blocked-read row run each side once or a few times,
// one after the other. Driver thread only, except where a row starts its own threads.
import Foundation
import Glibc
import NIOCore
import NIOPosix
import Synchronization
import ThreadKit

enum ScalingRows {
    static func child(cpus: Int, file: String, rounds: Int) -> Int32 {
        var out: [String] = []
        func emit(_ row: String, _ side: String, _ contender: String, _ value: Double, _ unit: String, _ target: String) {
            let r = ScalingResult(row: row, cpus: cpus, side: side, contender: contender, value: value, unit: unit, target: target)
            out.append(r.line)
            print("  \(cpus) CPU | \(row) | \(contender) | \(Scaling.format(value, unit))")
            fflush(nil)
            try? (out.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        }
        let harness = Harness(rounds: rounds)
        // TKBENCH_ONLY=text runs only the rows whose name contains it (for profiling one row).
        let only = ProcessInfo.processInfo.environment["TKBENCH_ONLY"]
        // Several alternatives may be given, separated by "|".
        func wants(_ name: String) -> Bool { only.map { $0.split(separator: "|").contains { name.contains($0) } } ?? true }
        /// A time-per-operation row: ours is contender 0, theirs the reference.
        func timeRow(_ name: String, _ row: @autoclosure () -> Row, throughput: Bool, unit: String = "ns", target: String) {
            guard wants(name) else { return }
            let row = row()
            let medians = harness.medians(row)
            let theirs = row.contenders.firstIndex { $0.name == row.reference } ?? 1
            for (side, i) in [("ours", 0), ("theirs", theirs)] {
                let ns = medians[i]
                let value = throughput ? 1e3 / ns : (unit == "µs" ? ns / 1e3 : ns)
                emit(name, side, row.contenders[i].name, value, throughput ? "M/s" : unit, target)
            }
        }
        timeRow("global async, 1 producer", DispatchBenchmarks.globalAsync(), throughput: true, target: "≥ 2× libdispatch")
        timeRow("global async, N producers", globalAsyncProducers(cpus), throughput: true, target: "≥ 2× libdispatch; 16 CPUs ≥ 4× 2 CPUs")
        timeRow("blocks across 1,000 serial queues", DispatchBenchmarks.manyQueues(), throughput: true, target: "≥ 2× libdispatch")
        timeRow("queue ping-pong (per hop)", DispatchBenchmarks.hop(), throughput: false, target: "≤ 0.8× libdispatch")
        timeRow("concurrentPerform", DispatchBenchmarks.concurrentPerform(), throughput: true, target: "≥ 1× libdispatch")
        timeRow("interactive behind background (start latency, median)", DispatchBenchmarks.interactiveBehindBackground(), throughput: false, unit: "µs", target: "≤ 1.0× libdispatch")
        timeRow("TKOperationQueue throughput", operationThroughput(), throughput: true, target: "≥ 1× OperationQueue")
        timeRow("port messages into a loop, 1 sender", PortBenchmarks.inProcessMessages(), throughput: true, target: "≥ 1.0× NIO execute")
        timeRow("port messages into a loop, N senders", portMessagesFromSenders(cpus), throughput: true, target: "≥ 1.0× NIO execute; 16 CPUs ≥ 4× 2 CPUs")
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
        Row(group: "scaling", name: "global async, N producers", operations: 200_000, unit: .nanoseconds, contenders: [
            Contender(name: "TKDispatchQueue.global()") { n in
                let group = TKDispatchGroup(), q = TKDispatchQueue.global()
                return parallel(producers) { _ in
                    for _ in 0..<(n / producers) { q.async(group: group) {} }
                    group.wait()
                }
            },
            Contender(name: "DispatchQueue.global()") { n in
                let group = DispatchGroup(), q = DispatchQueue.global()
                return parallel(producers) { _ in
                    for _ in 0..<(n / producers) { q.async(group: group) {} }
                    group.wait()
                }
            },
        ], reference: "DispatchQueue.global()", target: "")
    }

    /// Empty block operations with the default concurrency (the pool's width), until all finished.
    static func operationThroughput() -> Row {
        Row(group: "scaling", name: "TKOperationQueue throughput", operations: 100_000, unit: .nanoseconds, contenders: [
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
        return Row(group: "scaling", name: "port messages, N senders", operations: 400_000, unit: .nanoseconds, contenders: [
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
                let ran = Counter()   // touched only on the event loop
                let total = each * senders
                let start = now()
                _ = parallel(senders) { _ in
                    for _ in 0..<each { nio.execute { ran.value += 1; if ran.value == total { done.signal() } } }
                }
                done.wait()
                return Double(now() - start) * Double(n) / Double(max(1, total))
            },
        ], reference: "NIO EventLoop.execute", target: "")
    }

    static func recursiveLock() -> Row {
        let tk = TKRecursiveLock(), ns = NSRecursiveLock()
        return Row(group: "scaling", name: "uncontended recursive lock+unlock", operations: 2_000_000, unit: .nanoseconds, contenders: [
            Contender(name: "TKRecursiveLock") { n in timed { for _ in 0..<n { tk.lock(); tk.unlock() } } },
            Contender(name: "NSRecursiveLock") { n in timed { for _ in 0..<n { ns.lock(); ns.unlock() } } },
        ], reference: "NSRecursiveLock", target: "")
    }

    static func synchronizedToken() -> Row {
        let token = NSObject(), ns = NSRecursiveLock()
        return Row(group: "scaling", name: "uncontended synchronized(token)", operations: 1_000_000, unit: .nanoseconds, contenders: [
            Contender(name: "synchronized(token)") { n in timed { for _ in 0..<n { synchronized(token) { blackHole(0) } } } },
            Contender(name: "NSRecursiveLock") { n in timed { for _ in 0..<n { ns.lock(); blackHole(0); ns.unlock() } } },
        ], reference: "NSRecursiveLock", target: "")
    }
}
