// TKDispatchSemaphore.acquire() (docs/Concurrency.md §4): a unit taken at once when available, a
// suspended task served by signal(), FIFO among suspended tasks, cancellation before and during
// the wait taking no unit, a signal racing a cancellation losing no unit, and a mixed stress of
// threads (plain and timed waits) and tasks (some cancelled) whose units all come back. Judged by
// pthread-mutex counters, the waiter count and the final value drained with timed waits.
import Dispatch
import Foundation
import XCTest

@testable import ThreadKit

final class AsyncSemaphoreTests: XCTestCase {
    func testAcquireTakesAnAvailableUnitWithoutSuspending() async throws {
        let s = TKDispatchSemaphore(value: 2)
        try await s.acquire()
        try await s.acquire()
        XCTAssertEqual(s.currentValue, 0)
        XCTAssertEqual(s.asyncWaiterCount, 0)
        XCTAssertEqual(s.wait(until: .now + .milliseconds(1)), .timedOut)
    }

    func testASignalResumesASuspendedTask() async {
        let s = TKDispatchSemaphore(value: 0)
        let acquired = Flag()
        let task = Task {
            try await s.acquire()
            acquired.set()
        }
        let suspended = await eventually { s.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        XCTAssertFalse(acquired.isSet)
        XCTAssertEqual(s.signal(), 1, "signal did not report the waiter it served")
        assertSucceeded(await outcome(of: task), "acquire")
        XCTAssertEqual(s.currentValue, 0, "the unit was not consumed by the task")
        XCTAssertEqual(s.asyncWaiterCount, 0)
    }

    func testSuspendedTasksAreServedInTheOrderTheyBeganWaiting() async {
        let s = TKDispatchSemaphore(value: 0)
        let count = 8
        let order = Guarded<[Int]>([])
        var tasks: [Task<Void, any Error>] = []
        for i in 0..<count {
            tasks.append(
                Task {
                    try await s.acquire()
                    order.withLock { $0.append(i) }
                })
            // Sequenced: task i is registered before task i + 1 starts.
            let registered = await eventually { s.asyncWaiterCount == i + 1 }
            XCTAssertTrue(registered)
        }
        for k in 0..<count {
            s.signal()
            let served = await eventually { order.withLock { $0.count } == k + 1 }
            XCTAssertTrue(served, "signal \(k) served nobody")
            XCTAssertEqual(order.withLock { $0 }, Array(0...k), "not FIFO")
        }
        for task in tasks { assertSucceeded(await outcome(of: task), "acquire") }
        XCTAssertEqual(s.currentValue, 0)
    }

    func testACancelledAcquireThrowsAndTakesNoUnit() async {
        let s = TKDispatchSemaphore(value: 0)
        let before = Task {
            cancelCurrentTask()
            try await s.acquire()
        }
        assertCancelled(await outcome(of: before), "cancelled before")
        XCTAssertEqual(s.currentValue, 0)
        XCTAssertEqual(s.asyncWaiterCount, 0)

        let first = Task { try await s.acquire() }
        let suspendedFirst = await eventually { s.asyncWaiterCount == 1 }
        XCTAssertTrue(suspendedFirst)
        let second = Task { try await s.acquire() }
        let suspendedSecond = await eventually { s.asyncWaiterCount == 2 }
        XCTAssertTrue(suspendedSecond)
        first.cancel()
        assertCancelled(await outcome(of: first), "cancelled during")
        XCTAssertEqual(s.asyncWaiterCount, 1)
        XCTAssertEqual(s.currentValue, -1, "the cancelled waiter is still counted")
        s.signal()
        assertSucceeded(await outcome(of: second), "the waiter behind the cancelled one")
        XCTAssertEqual(s.currentValue, 0)
        s.signal()
        XCTAssertEqual(s.wait(until: .now), .success, "a unit was lost")
    }

    /// A signal and a cancellation released together, many times, with the task suspended or
    /// still arriving: either the task got the unit (and holds it) or it threw and the unit is
    /// back in the semaphore. Never both, never neither.
    func testASignalRacingACancellationLosesNoUnit() async {
        let s = TKDispatchSemaphore(value: 0)
        let rounds = stress(1_000)
        var acquired = 0
        for round in 0..<rounds {
            let task = Task { try await s.acquire() }
            if round % 2 == 0 {
                let suspended = await eventually { s.asyncWaiterCount == 1 }
                XCTAssertTrue(suspended)
            }
            let gate = SpinBarrier(parties: 2)
            let signaller = TestThread {
                gate.arriveAndWait()
                s.signal()
            }
            gate.arriveAndWait()
            task.cancel()
            let result = await outcome(of: task)
            XCTAssertTrue(signaller.join())
            switch result {
            case nil:
                XCTFail("the task was never resumed")
                return
            case .success?:
                acquired += 1
                XCTAssertEqual(s.currentValue, 0, "round \(round): the task got the unit but the semaphore kept it too")
            case .failure?:
                XCTAssertEqual(s.currentValue, 1, "round \(round): a cancelled task took the unit")
                XCTAssertEqual(s.wait(until: .now), .success)
            }
            XCTAssertEqual(s.asyncWaiterCount, 0)
        }
        XCTAssertEqual(s.currentValue, 0)
        XCTAssertLessThanOrEqual(acquired, rounds)
    }

    /// Threads (plain and short timed waits) and tasks (some cancelled at random points) share
    /// `units` units: never more than `units` holders at once, every completed acquire counted,
    /// and at the end exactly `units` units are left and no waiter is registered.
    func testMixedThreadsAndTasksWithCancellationsLoseNoUnit() async {
        let units = 2
        let s = TKDispatchSemaphore(value: units)
        let meter = ConcurrencyMeter()
        let taskWorkers = 4
        let threadWorkers = 2
        let perWorker = stress(2_500)
        let completed = JudgedCounter()
        let timeouts = JudgedCounter()

        // Holders give up their thread while holding a unit, so the others find none and wait.
        @Sendable func holdOnThread() {
            meter.enter()
            sched_yield()
            meter.leave()
            completed.add()
        }
        @Sendable func holdInTask() async {
            meter.enter()
            await Task.yield()
            meter.leave()
            completed.add()
        }

        let threads = (0..<threadWorkers).map { w in
            TestThread("sem-thread-\(w)") {
                var done = 0
                while done < perWorker {
                    if done % 3 == 0 {
                        guard s.wait(until: .now + .microseconds(20)) == .success else {
                            timeouts.add()
                            continue
                        }
                    } else {
                        s.wait()
                    }
                    holdOnThread()
                    s.signal()
                    done += 1
                }
            }
        }
        let tasks = (0..<taskWorkers).map { _ in
            Task {
                for _ in 0..<perWorker {
                    try await s.acquire()
                    await holdInTask()
                    s.signal()
                }
            }
        }
        // Quitters: tasks that acquire once and are cancelled at arbitrary points.
        let quitterCount = stress(400)
        let quitOutcomes = JudgedCounter()
        var quitters: [Task<Void, any Error>] = []
        for q in 0..<quitterCount {
            quitters.append(
                Task {
                    defer { quitOutcomes.add() }
                    try await s.acquire()
                    await holdInTask()
                    s.signal()
                })
            // Every other one is cancelled a few creations later: before it ran, while it waits,
            // as it is handed a unit, or after it finished.
            if q >= 6 && q % 2 == 0 { quitters[q - 6].cancel() }
            if q % 16 == 15 { await Task.yield() }
        }
        for task in tasks { assertSucceeded(await outcome(of: task, within: .seconds(120)), "a task worker") }
        var cancelled = 0
        for quitter in quitters {
            switch await outcome(of: quitter, within: .seconds(120)) {
            case nil: XCTFail("a quitter never finished")
            case .success?: break
            case .failure?: cancelled += 1
            }
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)), "thread workers did not finish")
        XCTAssertEqual(quitOutcomes.count, quitterCount)
        XCTAssertLessThanOrEqual(meter.peak, units, "more holders than units")
        XCTAssertEqual(completed.count, (taskWorkers + threadWorkers) * perWorker + quitterCount - cancelled)
        XCTAssertEqual(s.asyncWaiterCount, 0, "a waiter was left behind")
        XCTAssertEqual(s.currentValue, units, "units lost or made up")
        for _ in 0..<units { XCTAssertEqual(s.wait(until: .now), .success) }
        XCTAssertEqual(s.wait(until: .now + .milliseconds(1)), .timedOut)
    }
}
