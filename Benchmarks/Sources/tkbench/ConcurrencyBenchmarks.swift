// ConcurrencyBenchmarks: ThreadKit as a place for Swift concurrency to run, against the incumbents
// (docs/Concurrency.md):
//   - an actor call hop onto a run-loop thread: an actor whose executor is a TKRunLoop on its own
//     thread vs an actor on a SwiftNIO event loop (`EventLoop.executor`, NIO's
//     NIOSerialEventLoopExecutor) vs an actor on a DispatchQueue (Linux's Dispatch has no
//     DispatchSerialQueue and no SerialExecutor conformance, so a SerialExecutor wrapping
//     DispatchQueue.async stands in); the caller touches memory between calls, so each call is a
//     real hop there and back (see CallerWork);
//   - a @MainActor round trip from a background task while the main thread runs TKRunLoop.main vs
//     Foundation's RunLoop.main, each side in a fresh child process (the main thread must run the
//     loop);
//   - many small tasks in a task group with the pool as task executor vs Swift's default global
//     executor (one process, interleaved), and with the pool installed as the global executor vs
//     the default one (each side in a fresh child process: the install must come first);
//   - awaiting a TKDispatchGroup (`finished()`) vs a checked continuation around DispatchGroup.notify.
// After the rows, the task rows once more at 10^6 tasks (millionTasks).
// Async bodies run in a detached task, timed inside it; the driver sleeps on a semaphore.
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import ThreadKit

enum ConcurrencyBenchmarks {
    static func rows() -> [Row] {
        [actorHop(), mainActorRoundTrip(), taskExecutorTasks(), globalExecutorTasks(), groupAwait()]
    }

    // MARK: Actor hop

    actor LoopActor {
        let loop: TKRunLoop
        var calls = 0
        init(_ loop: TKRunLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
        func f() { calls += 1 }
    }

    actor NIOActor {
        let loop: any EventLoop
        var calls = 0
        init(_ loop: any EventLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }
        func f() { calls += 1 }
    }

    /// Linux's Dispatch has neither DispatchSerialQueue nor a SerialExecutor conformance for
    /// DispatchQueue, so this is what an actor on a Dispatch queue looks like there.
    final class DispatchQueueExecutor: SerialExecutor {
        let queue: DispatchQueue
        init(_ queue: DispatchQueue) { self.queue = queue }
        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
        }
        func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
    }

    actor DispatchActor {
        let executor: DispatchQueueExecutor
        var calls = 0
        init(_ executor: DispatchQueueExecutor) { self.executor = executor }
        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
        func f() { calls += 1 }
    }

    /// The caller's own work between calls: a relaxed atomic add, which touches memory, so the
    /// compiler must hop back to the task's executor after each call. With nothing between the
    /// calls, `for _ in 0..<n { await actor.f() }` hops onto the actor once and stays there (the
    /// hop back to the generic executor is dead and is optimised away): every side then measures
    /// a plain call of ~30 ns.
    final class CallerWork: Sendable {
        let calls = Atomic<Int>(0)
        func note() { calls.wrappingAdd(1, ordering: .relaxed) }
    }

    static func actorHop() -> Row {
        let loop = BenchLoop() // a TKThread running loop.run in default mode with a keep-alive source
        let tk = LoopActor(loop.loop)
        let nio = NIOActor(RunLoopBenchmarks.group.next())
        let gcd = DispatchActor(DispatchQueueExecutor(DispatchQueue(label: "bench-actor")))
        let work = CallerWork()
        return Row(
            group: "concurrency",
            name: "actor call from a task on the default executor, onto the actor's thread and back (await actor.f(), per call)",
            operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "actor on TKRunLoop") { n in
                    awaitTimed {
                        for _ in 0..<n {
                            await tk.f()
                            work.note()
                        }
                    }
                },
                Contender(name: "actor on NIO EventLoop.executor") { n in
                    awaitTimed {
                        for _ in 0..<n {
                            await nio.f()
                            work.note()
                        }
                    }
                },
                Contender(name: "actor on DispatchQueue (custom SerialExecutor)") { n in
                    awaitTimed {
                        for _ in 0..<n {
                            await gcd.f()
                            work.note()
                        }
                    }
                },
            ], reference: "actor on NIO EventLoop.executor", target: "≤ 0.7× NIO")
    }

    // MARK: Main actor round trip (child processes)

    static func mainActorRoundTrip() -> Row {
        Row(
            group: "concurrency", name: "@MainActor round trip from a detached task, fresh process (await MainActor.run {})",
            operations: 20_000, unit: .microseconds,
            contenders: [
                childContender("TKRunLoop.main.run()", ["mainactor-child", "tk"]),
                childContender("TKRunLoop.main.run(), pool as global executor", ["mainactor-child", "tk-global"]),
                childContender("Foundation RunLoop.main.run()", ["mainactor-child", "foundation"]),
            ], reference: "Foundation RunLoop.main.run()", target: "≤ 0.5×")
    }

    /// The child side: the main thread runs the loop; a detached task makes n main-actor round
    /// trips (after n/10 unmeasured), then prints the nanoseconds and exits from the main thread.
    /// With `tk-global` the detached task runs on ThreadKit's pool (installed as the global
    /// executor first), the whole program on ThreadKit.
    static func mainActorChild(_ kind: String, _ n: Int) -> Int32 {
        if kind == "tk-global" {
            do { try TKConcurrency.installGlobalExecutor() } catch {
                print("install failed: \(error)")
                return 1
            }
        }
        startMainActorRoundTrips(n)
        if kind == "foundation" { RunLoop.main.run() } else { TKRunLoop.main.run() }
        return 1
    }

    /// A detached task that makes n main-actor round trips (after n/10 unmeasured), then prints
    /// the nanoseconds and exits the process from the main thread, whatever loop runs there.
    static func startMainActorRoundTrips(_ n: Int) {
        Task.detached {
            for _ in 0..<max(1, n / 10) { await MainActor.run {} }
            let start = now()
            for _ in 0..<n { await MainActor.run {} }
            let elapsed = now() - start
            await MainActor.run {
                print(elapsed)
                fflush(nil)
                exit(0)
            }
        }
    }

    // MARK: Many small tasks

    static func taskExecutorTasks() -> Row {
        Row(
            group: "concurrency", name: "empty tasks in a discarding task group (throughput)", operations: 200_000, unit: .tasksPerSecond,
            contenders: [
                Contender(name: "TKConcurrency.taskExecutor preference") { n in
                    awaitTimed {
                        await withTaskExecutorPreference(TKConcurrency.taskExecutor) { await taskGroup(n) }
                    }
                },
                Contender(name: "default global executor") { n in
                    awaitTimed { await taskGroup(n) }
                },
            ], reference: "default global executor", target: "≥ 1.5× throughput")
    }

    static func globalExecutorTasks() -> Row {
        Row(
            group: "concurrency", name: "empty tasks in a discarding task group, fresh process (throughput)", operations: 200_000,
            unit: .tasksPerSecond,
            contenders: [
                childContender("TKConcurrency.installGlobalExecutor()", ["tasks-child", "tk"]),
                childContender("default global executor", ["tasks-child", "default"]),
            ], reference: "default global executor", target: "≥ 1.5× throughput")
    }

    /// n empty child tasks added to one discarding group, which ends when all have run. A
    /// discarding group, as fire-and-forget work is written: `withTaskGroup` keeps every finished
    /// child until the group is awaited (about 1.3 GB and 335k page faults for 10^6), which
    /// measures the allocator and the kernel's page clearing far more than any executor.
    static func taskGroup(_ n: Int) async {
        await withDiscardingTaskGroup { group in
            for _ in 0..<n { group.addTask {} }
        }
    }

    /// The child side: with `tk`, installs ThreadKit's pool as the global executor before anything
    /// starts a thread; then n/10 unmeasured tasks and n measured ones; prints the nanoseconds.
    static func tasksChild(_ kind: String, _ n: Int) -> Int32 {
        if kind == "tk" {
            do { try TKConcurrency.installGlobalExecutor() } catch {
                print("install failed: \(error)")
                return 1
            }
        }
        _ = awaitTimed { await taskGroup(max(1, n / 10)) } // starts the workers
        print(UInt64(awaitTimed { await taskGroup(n) }))
        return 0
    }

    /// The task rows once at 10^6 tasks (the interleaved rows use fewer to keep the group short).
    static func millionTasks() {
        let n = 1_000_000
        print("| 10^6 empty tasks in a discarding task group, once | contender | throughput | vs default |")
        print("|---|---|---|---|")
        for (label, row) in [("one process", taskExecutorTasks()), ("fresh process", globalExecutorTasks())] {
            let times = row.contenders.map { $0.measure(n) / Double(n) }
            for (i, c) in row.contenders.enumerated() {
                print(
                    String(format: "| %@ | %@ | %.2f M tasks/s | %.2f× |", i == 0 ? label : "", c.name, 1e3 / times[i], times[1] / times[i])
                )
            }
        }
        print("")
    }

    // MARK: Awaiting a group

    /// Each side's awaiting task on its own pool first (ThreadKit's through the task executor,
    /// Dispatch's as Swift's default executor on Linux is libdispatch), then ThreadKit's group
    /// awaited from a task on the default executor (every await crosses between the two pools).
    static func groupAwait() -> Row {
        Row(
            group: "concurrency", name: "await a group after async(group:) of an empty block (per await)", operations: 20_000,
            unit: .microseconds,
            contenders: [
                Contender(name: "TKDispatchGroup.finished(), task on TKConcurrency.taskExecutor") { n in
                    let group = TKDispatchGroup()
                    let q = TKDispatchQueue.global()
                    return awaitTimed {
                        await withTaskExecutorPreference(TKConcurrency.taskExecutor) {
                            for _ in 0..<n {
                                q.async(group: group) {}
                                try? await group.finished()
                            }
                        }
                    }
                },
                Contender(name: "TKDispatchGroup.finished(), task on the default executor") { n in
                    let group = TKDispatchGroup()
                    let q = TKDispatchQueue.global()
                    return awaitTimed {
                        for _ in 0..<n {
                            q.async(group: group) {}
                            try? await group.finished()
                        }
                    }
                },
                Contender(name: "DispatchGroup.notify + withCheckedContinuation") { n in
                    let group = DispatchGroup()
                    let q = DispatchQueue.global()
                    return awaitTimed {
                        for _ in 0..<n {
                            q.async(group: group) {}
                            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                                group.notify(queue: q) { c.resume() }
                            }
                        }
                    }
                },
            ], reference: "DispatchGroup.notify + withCheckedContinuation", target: "")
    }

    // MARK: Helpers

    final class Elapsed: @unchecked Sendable { var nanoseconds: UInt64 = 0 }

    /// Runs `body` in a detached task (default priority) and returns the nanoseconds it took,
    /// timed inside the task; the calling thread sleeps on a semaphore meanwhile.
    static func awaitTimed(_ body: @escaping @Sendable () async -> Void) -> Double {
        let result = Elapsed()
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            let start = now()
            await body()
            result.nanoseconds = now() - start
            done.signal()
        }
        done.wait()
        return Double(result.nanoseconds)
    }

    /// A contender measured in a fresh `tkbench ARGS… n` process that prints the elapsed
    /// nanoseconds of its n operations.
    static func childContender(_ name: String, _ arguments: [String]) -> Contender {
        Contender(name: name) { n in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = arguments + [String(n)]
            let out = Pipe()
            process.standardOutput = out
            guard (try? process.run()) != nil else { return .nan }
            let data = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard process.terminationStatus == 0, let nanoseconds = Double(text) else {
                FileHandle.standardError.write(Data("tkbench \(arguments.joined(separator: " ")) \(n): \(text)\n".utf8))
                return .nan
            }
            return nanoseconds
        }
    }
}
