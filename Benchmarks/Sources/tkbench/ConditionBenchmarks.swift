// ConditionBenchmarks: a turn passed back and forth between two threads through a condition
// variable (signal/wait ping-pong), and the NSConditionLock producer/consumer hand-off with
// HAS_DATA/NO_DATA — both as time per round trip.
import Foundation
import ThreadKit

enum ConditionBenchmarks {
    static func rows() -> [Row] { [pingPong(), handoff()] }

    static func pingPong() -> Row {
        Row(group: "conditions", name: "condition ping-pong (round trip)", operations: 20_000, unit: .microseconds, contenders: [
            Contender(name: "TKCondition") { n in
                let c = TKCondition(), turn = Counter()
                return parallel(2) { me in
                    for _ in 0..<n {
                        c.lock()
                        while turn.value != me { c.wait() }
                        turn.value = 1 - me
                        c.signal()
                        c.unlock()
                    }
                }
            },
            Contender(name: "NSCondition") { n in
                let c = NSCondition(), turn = Counter()
                return parallel(2) { me in
                    for _ in 0..<n {
                        c.lock()
                        while turn.value != me { c.wait() }
                        turn.value = 1 - me
                        c.signal()
                        c.unlock()
                    }
                }
            },
        ], reference: "NSCondition", target: "≤ 0.5× NSCondition")
    }

    static func handoff() -> Row {
        let NO_DATA = 0, HAS_DATA = 1
        return Row(group: "conditions", name: "condition-lock hand-off (round trip)", operations: 20_000, unit: .microseconds, contenders: [
            Contender(name: "TKConditionLock") { n in
                let l = TKConditionLock(condition: NO_DATA)
                return parallel(2) { me in
                    for _ in 0..<n {
                        if me == 0 { l.lock(whenCondition: NO_DATA); l.unlock(withCondition: HAS_DATA) }
                        else { l.lock(whenCondition: HAS_DATA); l.unlock(withCondition: NO_DATA) }
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
                        if me == 0 { _ = l.lock(whenCondition: NO_DATA, before: later); l.unlock(withCondition: HAS_DATA) }
                        else { _ = l.lock(whenCondition: HAS_DATA, before: later); l.unlock(withCondition: NO_DATA) }
                    }
                }
            },
        ], reference: "NSConditionLock", target: "≤ 0.5× NSConditionLock")
    }
}
