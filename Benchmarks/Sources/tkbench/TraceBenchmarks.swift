// TraceBenchmarks: what the trace recorder costs (docs/DiagnosticsTrace.md §6). Each row runs the
// same ThreadKit code with the recorder on (a fresh TKTrace session per measurement) and off, so
// the difference is the recording: a mark is one event, an async block to a global queue three
// (enqueue, start, end), an uncontended lock none (only contended slow paths record). With the
// recorder off each hook is one relaxed load and a branch: compare the `locks` and `dispatch`
// groups against main's for that.
import Foundation
import ThreadKit

enum TraceBenchmarks {
    static func rows() -> [Row] { [mark(), globalAsync(), uncontendedLock(), flightGlobalAsync(), signposts()] }

    /// Runs `body` with the flight recorder on (30 s window, its default budget) or everything off.
    private static func flight(_ on: Bool, _ body: () -> Double) -> Double {
        if on { TKTrace.startFlightRecorder(window: .seconds(30)) } else { TKTrace.stop() }
        defer { TKTrace.stop() }
        return body()
    }

    /// `n` empty blocks to a global queue, timed until all ran (the rows with and without a recorder).
    private static func timedGlobalAsync(_ n: Int) -> Double {
        let group = TKDispatchGroup()
        let q = TKDispatchQueue.global()
        return timed {
            for _ in 0..<n { q.async(group: group) {} }
            group.wait()
        }
    }

    /// Issue 26's target: the flight recorder on costs ≤ 5% on global async.
    static func flightGlobalAsync() -> Row {
        func contender(_ on: Bool) -> Contender {
            Contender(name: on ? "flight recorder on" : "off") { n in
                flight(on) { timedGlobalAsync(n) }
            }
        }
        return Row(
            group: "trace", name: "flight recorder: async empty blocks to a global queue (per block)", operations: 200_000,
            unit: .nanoseconds, contenders: [contender(true), contender(false)], reference: "off", target: "≤ 1.05×")
    }

    /// One interval (2 events) and one counter (1 event) per iteration: per event = time / 3.
    static func signposts() -> Row {
        func contender(_ on: Bool) -> Contender {
            Contender(name: on ? "flight recorder on (3 events)" : "off") { n in
                flight(on) {
                    timed {
                        for i in 0..<n {
                            TKTrace.interval("bench") { TKTrace.counter("bench depth", Double(i & 7)) }
                        }
                    }
                }
            }
        }
        return Row(
            group: "trace", name: "TKTrace.interval + TKTrace.counter (3 events; per iteration)", operations: 1_000_000,
            unit: .nanoseconds, contenders: [contender(true), contender(false)], reference: "off", target: "(on − off) / 3 ≤ 100 ns")
    }

    /// Runs `body` with the recorder on or off, leaving it off.
    private static func measured(_ recording: Bool, _ body: () -> Double) -> Double {
        if recording { TKTrace.start() } else { TKTrace.stop() }
        defer { TKTrace.stop() }
        return body()
    }

    static func mark() -> Row {
        Row(
            group: "trace", name: "TKTrace.mark (one event, named; per event)", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "recording") { n in measured(true) { timed { for _ in 0..<n { TKTrace.mark("bench") } } } },
                Contender(name: "off") { n in measured(false) { timed { for _ in 0..<n { TKTrace.mark("bench") } } } },
            ], reference: "off", target: "recording − off ≤ 150 ns")
    }

    static func globalAsync() -> Row {
        func contender(_ recording: Bool) -> Contender {
            Contender(name: recording ? "recording (3 events per block)" : "off") { n in
                measured(recording) { timedGlobalAsync(n) }
            }
        }
        return Row(
            group: "trace", name: "async empty blocks to a global queue (per block)", operations: 200_000, unit: .nanoseconds,
            contenders: [contender(true), contender(false)], reference: "off", target: "(recording − off) / 3 ≤ 150 ns")
    }

    static func uncontendedLock() -> Row {
        let lock = TKLock()
        return Row(
            group: "trace", name: "uncontended TKLock lock+unlock (records nothing)", operations: 2_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "recording") { n in
                    measured(true) {
                        timed {
                            for _ in 0..<n {
                                lock.lock()
                                lock.unlock()
                            }
                        }
                    }
                },
                Contender(name: "off") { n in
                    measured(false) {
                        timed {
                            for _ in 0..<n {
                                lock.lock()
                                lock.unlock()
                            }
                        }
                    }
                },
            ], reference: "off", target: "1.00×")
    }
}
