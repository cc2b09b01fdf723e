// TKDispatchSemaphore: counting, wake order independence, timed waits never early, signal's
// return value, and a ping-pong between two threads counted exactly.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchSemaphoreTests: XCTestCase {
    func testInitialValueUnitsAreAvailableAtOnce() {
        let s = TKDispatchSemaphore(value: 3)
        for _ in 0..<3 { XCTAssertEqual(s.wait(until: .now), .success) }
        XCTAssertEqual(s.wait(until: .now + .milliseconds(1)), .timedOut)
    }

    func testTimedWaitIsNeverEarlyAndGivesItsUnitBack() {
        let s = TKDispatchSemaphore(value: 0)
        for ms in [1, 5, 20] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            XCTAssertEqual(s.wait(until: deadline), .timedOut)
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        }
        XCTAssertEqual(s.signal(), 0, "nobody waits after the timeouts")
        XCTAssertEqual(s.wait(until: .now), .success)
    }

    func testSignalWakesAParkedWaiterAndSaysSo() {
        let s = TKDispatchSemaphore(value: 0)
        let waiter = TestThread { s.wait() }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { waiter.isParked })
        XCTAssertEqual(s.signal(), 1)
        XCTAssertTrue(waiter.join())
    }

    func testPingPongBetweenTwoThreadsIsExact() {
        let ping = TKDispatchSemaphore(value: 0), pong = TKDispatchSemaphore(value: 0)
        let rounds = stress(100_000)
        let counter = Atomic<Int>(0)
        let other = TestThread {
            for _ in 0..<rounds { ping.wait(); counter.wrappingAdd(1, ordering: .relaxed); pong.signal() }
        }
        for _ in 0..<rounds { ping.signal(); pong.wait() }
        XCTAssertTrue(other.join())
        XCTAssertEqual(counter.load(ordering: .relaxed), rounds)
    }

    func testASemaphoreGuardsTwoResources() {
        // The seeds' "two resources" scenario: at most two holders at any time, everyone served.
        let s = TKDispatchSemaphore(value: 2)
        let holders = Atomic<Int>(0), maxHolders = Atomic<Int>(0)
        let served = JudgedCounter()
        let threads = TestThread.spawn(6, "user") { _ in
            for _ in 0..<stress(2_000) {
                s.wait()
                let now = holders.wrappingAdd(1, ordering: .relaxed).newValue
                var m = maxHolders.load(ordering: .relaxed)
                while now > m, !maxHolders.compareExchange(expected: m, desired: now, ordering: .relaxed).exchanged {
                    m = maxHolders.load(ordering: .relaxed)
                }
                served.add()
                holders.wrappingSubtract(1, ordering: .relaxed)
                s.signal()
            }
        }
        XCTAssertTrue(joinAll(threads))
        XCTAssertLessThanOrEqual(maxHolders.load(ordering: .relaxed), 2)
        XCTAssertEqual(served.count, 6 * stress(2_000))
    }

    func testTimeoutsRacingSignalsLoseNoUnit() {
        for _ in 0..<stress(2_000) {
            let s = TKDispatchSemaphore(value: 0)
            let got = Atomic<Int>(0)
            let waiter = TestThread { if s.wait(until: .now + .microseconds(50)) == .success { got.wrappingAdd(1, ordering: .relaxed) } }
            s.signal()
            XCTAssertTrue(waiter.join())
            // Either the waiter took the unit, or it is still there.
            let left = s.wait(until: .now) == .success ? 1 : 0
            XCTAssertEqual(got.load(ordering: .relaxed) + left, 1)
        }
    }
}
