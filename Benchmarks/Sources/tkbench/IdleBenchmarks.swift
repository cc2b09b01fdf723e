// IdleBenchmarks: CPU burnt while nothing happens — a thread waiting in TKCondition.wait, and one
// blocked in TKLock.lock behind a holder, for the measured time. Reported as milliseconds of
// process CPU per second of waiting: near 0 means the waiters sleep instead of spinning.
import Foundation
import ThreadKit

enum IdleBenchmarks {
    static func rows() -> [Row] {
        [Row(group: "idle", name: "CPU while a waiter idles 0.3 s", operations: 1, unit: .millisecondsPerSecond, contenders: [
            Contender(name: "TKCondition.wait") { _ in
                idleCPU { done in
                    let c = TKCondition()
                    c.lock()
                    while !done() { _ = c.wait(until: .now + .milliseconds(50)) }
                    c.unlock()
                }
            },
            Contender(name: "TKLock.lock behind a holder") { _ in
                let lock = TKLock()
                lock.lock()
                let result = idleCPU { done in
                    lock.lock()   // released by the driver when the time is up
                    lock.unlock()
                } release: { lock.unlock() }
                return result
            },
            Contender(name: "NSCondition.wait") { _ in
                idleCPU { done in
                    let c = NSCondition()
                    c.lock()
                    while !done() { _ = c.wait(until: Date() + 0.05) }
                    c.unlock()
                }
            },
        ], reference: "NSCondition.wait", target: "≈ 0 (no busy spinning)")]
    }

    /// Runs `waiter` on a thread for 0.3 s and returns the process CPU milliseconds per second.
    static func idleCPU(_ waiter: @escaping @Sendable (@Sendable () -> Bool) -> Void,
                        release: @escaping () -> Void = {}) -> Double {
        let until = Date() + 0.3
        let finished = DispatchSemaphore(value: 0)
        let before = cpuNanoseconds()
        Thread {
            waiter { Date() >= until }
            finished.signal()
        }.start()
        Thread.sleep(until: until)
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
