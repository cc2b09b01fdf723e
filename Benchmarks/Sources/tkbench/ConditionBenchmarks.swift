// ConditionBenchmarks: a turn passed back and forth between two threads through a condition
// variable (signal/wait ping-pong), and the NSConditionLock producer/consumer hand-off with
// HAS_DATA/NO_DATA — both as time per round trip.
import Foundation
import ThreadKit

enum ConditionBenchmarks {
    static func rows() -> [Row] { [pingPong(), handoff()] }

    static func pingPong() -> Row {
        Row(
            group: "conditions", name: "condition ping-pong (round trip)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKCondition") { n in
                    let c = TKCondition()
                    return turns(n, lock: c.lock, unlock: c.unlock, wait: c.wait, signal: c.signal)
                },
                Contender(name: "NSCondition") { n in
                    let c = NSCondition()
                    return turns(n, lock: c.lock, unlock: c.unlock, wait: c.wait, signal: c.signal)
                },
            ], reference: "NSCondition", target: "≤ 0.5× NSCondition")
    }

    /// Two threads take turns `n` times each through one condition variable; returns the time.
    static func turns(
        _ n: Int, lock: @escaping @Sendable () -> Void, unlock: @escaping @Sendable () -> Void,
        wait: @escaping @Sendable () -> Void, signal: @escaping @Sendable () -> Void
    ) -> Double {
        let turn = Counter() // guarded by the condition's lock
        return parallel(2) { me in
            for _ in 0..<n {
                lock()
                while turn.value != me { wait() }
                turn.value = 1 - me
                signal()
                unlock()
            }
        }
    }

    static func handoff() -> Row {
        let NO_DATA = 0
        let HAS_DATA = 1
        return Row(
            group: "conditions", name: "condition-lock hand-off (round trip)", operations: 20_000, unit: .microseconds,
            contenders: [
                Contender(name: "TKConditionLock") { n in
                    let l = TKConditionLock(condition: NO_DATA)
                    return parallel(2) { me in
                        for _ in 0..<n {
                            if me == 0 {
                                l.lock(whenCondition: NO_DATA)
                                l.unlock(withCondition: HAS_DATA)
                            } else {
                                l.lock(whenCondition: HAS_DATA)
                                l.unlock(withCondition: NO_DATA)
                            }
                        }
                    }
                },
                Contender(name: "NSConditionLock") { n in
                    // NSConditionLock.lock(whenCondition:) traps on Linux when it has to wait (its
                    // distantFuture deadline overflows); a finite deadline is the working form.
                    let l = NSConditionLock(condition: NO_DATA)
                    return parallel(2) { me in
                        for _ in 0..<n {
                            let later = Date() + 3600
                            if me == 0 {
                                _ = l.lock(whenCondition: NO_DATA, before: later)
                                l.unlock(withCondition: HAS_DATA)
                            } else {
                                _ = l.lock(whenCondition: HAS_DATA, before: later)
                                l.unlock(withCondition: NO_DATA)
                            }
                        }
                    }
                },
            ], reference: "NSConditionLock", target: "≤ 0.5× NSConditionLock")
    }
}
