// TKDispatchSemaphore: counting, FIFO service of parked waiters (threads and tasks in one order),
// timed waits never early, signal's return value, and a ping-pong between two threads counted
// exactly.
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

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

    func testParkedWaitersAreServedInTheOrderTheyArrived() {
        let s = TKDispatchSemaphore(value: 0)
        let served = Guarded<[Int]>([])
        let count = 8
        var waiters: [TestThread] = []
        for i in 0..<count {
            let waiter = TestThread("waiter-\(i)") {
                s.wait()
                served.withLock { $0.append(i) }
            }
            // Judged from /proc: asleep in the kernel before the next one arrives.
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { waiter.isParked })
            waiters.append(waiter)
        }
        for i in 0..<count {
            XCTAssertEqual(s.signal(), 1)
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { served.withLock { $0.count } == i + 1 })
            XCTAssertEqual(served.withLock { $0.last }, i, "signal \(i) woke someone other than the \(i)th waiter")
        }
        XCTAssertTrue(joinAll(waiters))
    }

    func testParkedThreadsAndSuspendedTasksShareOneOrder() {
        let s = TKDispatchSemaphore(value: 0)
        let served = Guarded<[String]>([])
        let first = TestThread("thread-0") {
            s.wait()
            served.withLock { $0.append("thread 0") }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { first.isParked })
        let task = Task.detached {
            try await s.acquire()
            served.withLock { $0.append("task 1") }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { s.asyncWaiterCount == 1 })
        let third = TestThread("thread-2") {
            s.wait()
            served.withLock { $0.append("thread 2") }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { third.isParked })
        for i in 0..<3 {
            s.signal()
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { served.withLock { $0.count } == i + 1 })
        }
        XCTAssertEqual(served.withLock { $0 }, ["thread 0", "task 1", "thread 2"])
        XCTAssertTrue(joinAll([first, third]))
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            _ = try? await task.value
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testATimedOutParkedWaiterLeavesTheQueue() {
        let s = TKDispatchSemaphore(value: 0)
        let timedOut = TestThread("impatient") { _ = s.wait(until: .now + .milliseconds(20)) }
        XCTAssertTrue(timedOut.join())
        XCTAssertEqual(s.threadWaiterCount, 0)
        let patient = TestThread("patient") { s.wait() }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { patient.isParked })
        XCTAssertEqual(s.signal(), 1, "the unit goes to the waiter still there")
        XCTAssertTrue(patient.join())
    }

    func testPingPongBetweenTwoThreadsIsExact() {
        let ping = TKDispatchSemaphore(value: 0)
        let pong = TKDispatchSemaphore(value: 0)
        let rounds = stress(100_000)
        let counter = Atomic<Int>(0)
        let other = TestThread {
            for _ in 0..<rounds {
                ping.wait()
                counter.wrappingAdd(1, ordering: .relaxed)
                pong.signal()
            }
        }
        for _ in 0..<rounds {
            ping.signal()
            pong.wait()
        }
        XCTAssertTrue(other.join())
        XCTAssertEqual(counter.load(ordering: .relaxed), rounds)
    }

    func testASemaphoreGuardsTwoResources() {
        // The seeds' "two resources" scenario: at most two holders at any time, everyone served.
        let s = TKDispatchSemaphore(value: 2)
        let holders = Atomic<Int>(0)
        let maxHolders = Atomic<Int>(0)
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
