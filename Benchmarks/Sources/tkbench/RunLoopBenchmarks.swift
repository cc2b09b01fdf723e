// RunLoopBenchmarks: TKRunLoop against SwiftNIO's event loops and Foundation's RunLoop:
//   - cross-thread round trip: work hops from a loop on one thread to a loop on another and back,
//     each loop otherwise asleep (TKRunLoop.perform vs NIO EventLoop.execute);
//   - throughput of blocks posted from another thread (perform vs execute);
//   - draining blocks posted by the loop's own thread (TKRunLoop vs Foundation RunLoop.perform);
//   - timer lateness (mean and p99) of a 1 ms repeating timer: TKTimer, Foundation's Timer, and
//     NIO scheduleTask chained on absolute deadlines.
// Foundation's RunLoop.perform from another thread does not wake a sleeping loop on Linux, so it
// has no cross-thread row.
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import ThreadKit

/// A TKThread running a TKRunLoop until `finish()`.
final class BenchLoop: @unchecked Sendable {
    private(set) var loop: TKRunLoop!
    let thread: TKThread
    private let stopFlag = Atomic<Bool>(false)

    init() {
        let ready = DispatchSemaphore(value: 0)
        let box = LoopBox()
        let stop = StopBox()
        thread = TKThread(name: "bench-loop") {
            let loop = TKRunLoop.current
            loop.add(TKRunLoopSource {}, forMode: .default)
            box.loop = loop
            ready.signal()
            while !stop.flag.load(ordering: .acquiring) { loop.run(mode: .default, before: .now + .seconds(60)) }
        }
        stopBox = stop
        thread.start()
        ready.wait()
        loop = box.loop
    }

    private let stopBox: StopBox
    final class LoopBox: @unchecked Sendable { var loop: TKRunLoop? }
    final class StopBox: Sendable { let flag = Atomic<Bool>(false) }

    func finish() {
        stopBox.flag.store(true, ordering: .releasing)
        loop.perform { TKRunLoop.current.stop() } // stops the run executing it
        thread.join()
    }
}

enum RunLoopBenchmarks {
    static func rows() -> [Row] {
        [roundTrip(), crossThreadThroughput(), sameThreadDrain()]
    }

    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    static func roundTrip() -> Row {
        let a = BenchLoop()
        let b = BenchLoop()
        let nioA = group.next()
        let nioB = group.next()
        return Row(
            group: "runloop", name: "cross-thread round trip (loop A → loop B → A)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKRunLoop.perform") { n in
                    let done = DispatchSemaphore(value: 0)
                    let remaining = Counter()
                    @Sendable func hop() {
                        b.loop.perform {
                            a.loop.perform {
                                remaining.value -= 1
                                if remaining.value == 0 { done.signal() } else { hop() }
                            }
                        }
                    }
                    remaining.value = n
                    return timed {
                        a.loop.perform { hop() }
                        done.wait()
                    }
                },
                Contender(name: "NIO EventLoop.execute") { n in
                    let done = DispatchSemaphore(value: 0)
                    let remaining = Counter()
                    @Sendable func hop() {
                        nioB.execute {
                            nioA.execute {
                                remaining.value -= 1
                                if remaining.value == 0 { done.signal() } else { hop() }
                            }
                        }
                    }
                    remaining.value = n
                    return timed {
                        nioA.execute { hop() }
                        done.wait()
                    }
                },
            ], reference: "NIO EventLoop.execute", target: "≤ 0.5× NIO")
    }

    static func crossThreadThroughput() -> Row {
        let a = BenchLoop()
        let nio = group.next()
        return Row(
            group: "runloop", name: "blocks posted from another thread (per block)", operations: 500_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKRunLoop.perform") { n in
                    let done = DispatchSemaphore(value: 0)
                    let ran = Counter()
                    return timed {
                        for _ in 0..<n {
                            a.loop.perform {
                                ran.value += 1
                                if ran.value == n { done.signal() }
                            }
                        }
                        done.wait()
                    }
                },
                nioExecute(nio),
            ], reference: "NIO EventLoop.execute", target: "throughput ≥ 1.5× NIO (≤ 0.67× time)")
    }

    /// n blocks posted to a NIO event loop from this thread, timed until the last has run.
    static func nioExecute(_ nio: any EventLoop) -> Contender {
        Contender(name: "NIO EventLoop.execute") { n in
            let done = DispatchSemaphore(value: 0)
            let ran = Counter()
            return timed {
                for _ in 0..<n {
                    nio.execute {
                        ran.value += 1
                        if ran.value == n { done.signal() }
                    }
                }
                done.wait()
            }
        }
    }

    static func sameThreadDrain() -> Row {
        Row(
            group: "runloop", name: "same-thread perform + drain (per block)", operations: 100_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKRunLoop.perform") { n in
                    let loop = TKRunLoop.current
                    let ran = Counter()
                    return timed {
                        for _ in 0..<n { loop.perform { ran.value += 1 } }
                        while ran.value < n { loop.run(mode: .default, for: .zero, returnAfterSourceHandled: false) }
                    }
                },
                Contender(name: "Foundation RunLoop.perform") { n in
                    let loop = RunLoop.current
                    let ran = Counter()
                    return timed {
                        for _ in 0..<n { loop.perform { ran.value += 1 } }
                        while ran.value < n { _ = loop.run(mode: .default, before: Date()) }
                    }
                },
            ], reference: "Foundation RunLoop.perform", target: "≤ 0.1× Foundation")
    }

    // MARK: Timer lateness

    /// Prints mean and p99 lateness of a 1 ms repeating timer for each implementation.
    static func timerLateness(seconds: Double) {
        // Interleaved like every other row: 8 rounds of 1/8 of the fires per contender, so a
        // hiccup of the host lands on all three alike rather than on one whole run.
        let fires = Int(seconds * 1000)
        let perRound = max(1, fires / 8)
        var results: [(String, [Double])] = [
            ("TKTimer (TKRunLoop)", []), ("Foundation Timer (RunLoop)", []),
            ("NIO scheduleTask (absolute deadlines)", []),
        ]
        for _ in 0..<8 {
            results[0].1 += tkLateness(perRound)
            results[1].1 += foundationLateness(perRound)
            results[2].1 += nioLateness(perRound)
        }
        let nioP99 = percentile(results[2].1, 0.99)
        print("| timer lateness, 1 ms repeating, \(perRound * 8) fires, interleaved | contender | mean / p99 | p99 vs NIO | target |")
        print("|---|---|---|---|---|")
        for (i, (name, samples)) in results.enumerated() {
            let mean = samples.reduce(0, +) / Double(samples.count)
            let p99 = percentile(samples, 0.99)
            print(
                String(
                    format: "| | %@ | %.1f µs / %.1f µs | %.2f× | %@ |", name, mean / 1000, p99 / 1000, p99 / nioP99,
                    i == 0 ? "p99 ≤ NIO's" : ""))
        }
        print("")
    }

    static func percentile(_ samples: [Double], _ p: Double) -> Double {
        let sorted = samples.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    static func tkLateness(_ fires: Int) -> [Double] {
        let samples = SampleBox(capacity: fires)
        let t = TKThread(name: "tk-timer") {
            let loop = TKRunLoop.current
            let timer = TKTimer(interval: .milliseconds(1), repeats: true) { timer in
                let late = ContinuousClock.now - timer.fireDate
                samples.values.append(Double(late.components.attoseconds) / 1e9 + Double(late.components.seconds) * 1e9)
                if samples.values.count == fires { timer.invalidate() }
            }
            loop.add(timer, forMode: .default)
            loop.run()
        }
        t.start()
        t.join()
        return samples.values
    }

    static func foundationLateness(_ fires: Int) -> [Double] {
        let samples = SampleBox(capacity: fires)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let timer = Timer(timeInterval: 0.001, repeats: true) { timer in
                samples.values.append(Date().timeIntervalSince(timer.fireDate) * 1e9)
                if samples.values.count == fires { timer.invalidate() }
            }
            RunLoop.current.add(timer, forMode: .default)
            while timer.isValid { _ = RunLoop.current.run(mode: .default, before: Date() + 1) }
            done.signal()
        }.start()
        done.wait()
        return samples.values
    }

    static func nioLateness(_ fires: Int) -> [Double] {
        let samples = SampleBox(capacity: fires)
        let done = DispatchSemaphore(value: 0)
        let el = group.next()
        @Sendable func schedule(_ deadline: NIODeadline) {
            el.scheduleTask(deadline: deadline) {
                samples.values.append(Double((NIODeadline.now() - deadline).nanoseconds))
                if samples.values.count == fires { done.signal() } else { schedule(deadline + .milliseconds(1)) }
            }
        }
        el.execute { schedule(.now() + .milliseconds(1)) }
        done.wait()
        return samples.values
    }

    final class SampleBox: @unchecked Sendable {
        var values: [Double] = []
        init(capacity: Int) { values.reserveCapacity(capacity) }
    }
}
