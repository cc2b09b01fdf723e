// AtomicBenchmarks: an uncontended atomic increment, sequentially consistent (OSAtomic's Barrier
// variants) and relaxed, against Synchronization.Atomic doing the same.
import Synchronization
import ThreadKit

enum AtomicBenchmarks {
    static func rows() -> [Row] {
        let tk = TKAtomicInt64(0)
        let std = Atomic<Int64>(0)
        return [
            Row(
                group: "atomics", name: "increment (barrier)", operations: 5_000_000, unit: .nanoseconds,
                contenders: [
                    Contender(name: "TKAtomicInt64.increment()") { n in timed { for _ in 0..<n { tk.increment() } } },
                    Contender(name: "Atomic<Int64> seq_cst") { n in
                        timed { for _ in 0..<n { std.wrappingAdd(1, ordering: .sequentiallyConsistent) } }
                    },
                ], reference: "Atomic<Int64> seq_cst", target: "—"),
            Row(
                group: "atomics", name: "increment (no barrier)", operations: 5_000_000, unit: .nanoseconds,
                contenders: [
                    Contender(name: "TKAtomicInt64.increment(barrier: false)") { n in
                        timed { for _ in 0..<n { tk.increment(barrier: false) } }
                    },
                    Contender(name: "Atomic<Int64> relaxed") { n in timed { for _ in 0..<n { std.wrappingAdd(1, ordering: .relaxed) } } },
                ], reference: "Atomic<Int64> relaxed", target: "—"),
        ]
    }
}
