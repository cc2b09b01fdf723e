// IdleBenchmarks: CPU burnt while nothing happens — a thread waiting in TKCondition.wait, and one
// blocked in TKLock.lock behind a holder, for the measured time. Reported as milliseconds of
// process CPU per second of waiting: near 0 means the waiters sleep instead of spinning.
import Foundation
import ThreadKit

enum IdleBenchmarks {
    static func rows() -> [Row] {
        [
            Row(
                group: "idle", name: "CPU while a waiter idles 0.3 s", operations: 1, unit: .millisecondsPerSecond,
                contenders: [
                    Contender(name: "TKCondition.wait") { _ in
                        let c = TKCondition()
                        let go = Counter()
                        return idleCPU {
                            c.lock()
                            while go.value == 0 { c.wait() }
                            c.unlock()
                        } release: {
                            c.lock()
                            go.value = 1
                            c.signal()
                            c.unlock()
                        }
                    },
                    Contender(name: "TKLock.lock behind a holder") { _ in
                        let lock = TKLock()
                        lock.lock()
                        return idleCPU {
                            lock.lock()
                            lock.unlock()
                        } release: {
                            lock.unlock()
                        }
                    },
                    Contender(name: "NSCondition.wait") { _ in
                        let c = NSCondition()
                        let go = Counter()
                        return idleCPU {
                            c.lock()
                            while go.value == 0 { c.wait() }
                            c.unlock()
                        } release: {
                            c.lock()
                            go.value = 1
                            c.signal()
                            c.unlock()
                        }
                    },
                ], reference: "NSCondition.wait", target: "≈ 0 (no busy spinning)")
        ]
    }

    /// Starts `waiter` on a thread, lets it wait 0.3 s, calls `release`, and returns the process
    /// CPU milliseconds per second of waiting (thread start and wake-up included).
    static func idleCPU(_ waiter: @escaping @Sendable () -> Void, release: () -> Void) -> Double {
        let finished = DispatchSemaphore(value: 0)
        let before = cpuNanoseconds()
        Thread {
            waiter()
            finished.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.3)
        release()
        finished.wait()
        return Double(cpuNanoseconds() - before) / 1e6 / 0.3
    }

    static func cpuNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
