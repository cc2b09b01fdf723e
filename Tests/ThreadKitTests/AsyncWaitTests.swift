// Awaiting the end of ThreadKit objects (docs/Concurrency.md §4): TKThread, TKOperation,
// TKDispatchWorkItem and TKDispatchGroup `finished()`. Each completes when the event happens and at
// once when it already has; a task cancelled before or during the wait throws CancellationError
// and leaves no waiter registered (the objects' waiter counts); cancellation racing the event
// resumes the task exactly once. Events are released through Foundation semaphores, and what the
// waited-for code did is judged by flags it set itself.
import Dispatch
import Foundation
import XCTest

@testable import ThreadKit

final class AsyncWaitTests: XCTestCase {
    // MARK: TKThread

    /// A thread blocked on `gate`, which sets `ran` as the last thing it does.
    private func blockedThread(joinable: Bool = false) -> (TKThread, DispatchSemaphore, Flag) {
        let gate = DispatchSemaphore(value: 0)
        let ran = Flag()
        let thread = TKThread(name: "awaited") {
            gate.wait()
            ran.set()
        }
        thread.isDetached = !joinable
        thread.start()
        return (thread, gate, ran)
    }

    func testThreadFinishedResumesWhenTheThreadEnds() async {
        for joinable in [false, true] {
            let (thread, gate, ran) = blockedThread(joinable: joinable)
            let waiter = Task {
                try await thread.finished()
                XCTAssertTrue(ran.isSet, "resumed before the thread's end")
            }
            let suspended = await eventually { thread.asyncWaiterCount == 1 }
            XCTAssertTrue(suspended, "the task never suspended")
            gate.signal()
            assertSucceeded(await outcome(of: waiter), "finished() of a \(joinable ? "joinable" : "detached") thread")
            XCTAssertEqual(thread.asyncWaiterCount, 0)
            XCTAssertTrue(thread.isFinished)
        }
    }

    func testThreadFinishedReturnsAtOnceForAFinishedThreadWithoutSuspending() async {
        let (thread, gate, _) = blockedThread(joinable: true)
        gate.signal()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        // In a cancelled task: an await that suspended would throw, so success shows it did not.
        let task = Task {
            cancelCurrentTask()
            try await thread.finished()
        }
        assertSucceeded(await outcome(of: task), "finished() of a finished thread")
        XCTAssertEqual(thread.asyncWaiterCount, 0)
    }

    func testThreadFinishedInACancelledTaskThrowsAtOnce() async {
        let (thread, gate, _) = blockedThread()
        defer { gate.signal() }
        let task = Task {
            cancelCurrentTask()
            try await thread.finished()
        }
        assertCancelled(await outcome(of: task), "finished() in a cancelled task")
        XCTAssertEqual(thread.asyncWaiterCount, 0)
    }

    func testThreadFinishedCancelledDuringTheWaitThrowsAndLeavesNoWaiter() async {
        let (thread, gate, _) = blockedThread()
        let tasks = (0..<3).map { _ in Task { try await thread.finished() } }
        let suspended = await eventually { thread.asyncWaiterCount == 3 }
        XCTAssertTrue(suspended)
        tasks[1].cancel()
        assertCancelled(await outcome(of: tasks[1]), "the cancelled waiter")
        XCTAssertEqual(thread.asyncWaiterCount, 2, "the cancelled waiter is still registered (or took others with it)")
        gate.signal()
        for i in [0, 2] { assertSucceeded(await outcome(of: tasks[i]), "waiter \(i)") }
        XCTAssertEqual(thread.asyncWaiterCount, 0)
    }

    // MARK: TKOperation

    func testOperationFinishedResumesAfterTheOperationAndItsCompletionBlock() async {
        let queue = TKOperationQueue()
        let gate = DispatchSemaphore(value: 0)
        let completed = Flag()
        let operation = TKBlockOperation { gate.wait() }
        operation.completionBlock = { completed.set() }
        queue.addOperation(operation)
        let waiter = Task {
            try await operation.finished()
            XCTAssertTrue(completed.isSet, "resumed before the completion block ran")
        }
        let suspended = await eventually { operation.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        gate.signal()
        assertSucceeded(await outcome(of: waiter), "finished() of an operation")
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(operation.asyncWaiterCount, 0)
        // Already finished: no suspension, even in a cancelled task.
        let late = Task {
            cancelCurrentTask()
            try await operation.finished()
        }
        assertSucceeded(await outcome(of: late), "finished() of a finished operation")
    }

    func testACancelledOperationCountsAsFinished() async throws {
        let queue = TKOperationQueue()
        let gate = DispatchSemaphore(value: 0)
        defer { gate.signal() }
        let blocker = TKBlockOperation { gate.wait() }
        let ran = Flag()
        let dependent = TKBlockOperation { ran.set() }
        try dependent.addDependency(blocker)
        queue.addOperations([blocker, dependent], waitUntilFinished: false)
        let waiter = Task { try await dependent.finished() }
        let suspended = await eventually { dependent.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        dependent.cancel() // ready at once: its queue finishes it without running it
        assertSucceeded(await outcome(of: waiter), "finished() of a cancelled operation")
        XCTAssertFalse(ran.isSet)
        XCTAssertFalse(blocker.isFinished, "the dependency is still blocked")
    }

    func testOperationFinishedCancelledBeforeAndDuringTheWaitThrows() async {
        let queue = TKOperationQueue()
        let gate = DispatchSemaphore(value: 0)
        let operation = TKBlockOperation { gate.wait() }
        queue.addOperation(operation)
        let before = Task {
            cancelCurrentTask()
            try await operation.finished()
        }
        assertCancelled(await outcome(of: before), "cancelled before")
        let during = Task { try await operation.finished() }
        let suspended = await eventually { operation.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        during.cancel()
        assertCancelled(await outcome(of: during), "cancelled during")
        XCTAssertEqual(operation.asyncWaiterCount, 0)
        XCTAssertFalse(operation.isCancelled, "cancelling the task cancelled the operation")
        gate.signal()
        queue.waitUntilAllOperationsAreFinished()
    }

    // MARK: TKDispatchWorkItem

    func testWorkItemFinishedResumesAfterThePerform() async {
        let gate = DispatchSemaphore(value: 0)
        let ran = Flag()
        let item = TKDispatchWorkItem {
            gate.wait()
            ran.set()
        }
        TKDispatchQueue.global().async(execute: item)
        let waiter = Task {
            try await item.finished()
            XCTAssertTrue(ran.isSet, "resumed before the block ended")
        }
        let suspended = await eventually { item.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        gate.signal()
        assertSucceeded(await outcome(of: waiter), "finished() of a work item")
        XCTAssertEqual(item.asyncWaiterCount, 0)
        let late = Task {
            cancelCurrentTask()
            try await item.finished()
        }
        assertSucceeded(await outcome(of: late), "finished() of a performed item")
    }

    func testACancelledWorkItemFinishesWhenItsQueueReachesIt() async {
        let queue = TKDispatchQueue(label: "serial")
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }
        let ran = Flag()
        let item = TKDispatchWorkItem { ran.set() }
        queue.async(execute: item)
        let waiter = Task { try await item.finished() }
        let suspended = await eventually { item.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        item.cancel()
        gate.signal()
        assertSucceeded(await outcome(of: waiter), "finished() of a cancelled item")
        XCTAssertFalse(ran.isSet)
    }

    func testWorkItemFinishedCancelledBeforeAndDuringTheWaitThrows() async {
        let item = TKDispatchWorkItem {}
        let before = Task {
            cancelCurrentTask()
            try await item.finished()
        }
        assertCancelled(await outcome(of: before), "cancelled before")
        let during = Task { try await item.finished() }
        let suspended = await eventually { item.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        during.cancel()
        assertCancelled(await outcome(of: during), "cancelled during")
        XCTAssertEqual(item.asyncWaiterCount, 0)
        item.perform()
    }

    /// Cancellation and the finish released together, many times: each task resumes exactly once
    /// (it completes, with success or CancellationError), and no waiter is left.
    func testCancellationRacingTheFinishResumesExactlyOnce() async {
        let rounds = stress(1_000)
        var successes = 0
        var cancellations = 0
        for _ in 0..<rounds {
            let item = TKDispatchWorkItem {}
            let waiter = Task { try await item.finished() }
            let gate = SpinBarrier(parties: 2)
            let performer = TestThread {
                gate.arriveAndWait()
                item.perform()
            }
            gate.arriveAndWait()
            waiter.cancel()
            switch await outcome(of: waiter) {
            case nil:
                XCTFail("a waiter was never resumed")
                return
            case .success?: successes += 1
            case .failure(let error)?:
                XCTAssertTrue(error is CancellationError)
                cancellations += 1
            }
            XCTAssertTrue(performer.join())
            XCTAssertEqual(item.asyncWaiterCount, 0)
        }
        XCTAssertEqual(successes + cancellations, rounds)
    }

    // MARK: TKDispatchGroup

    func testGroupFinishedResumesWhenTheCountReachesZero() async {
        let group = TKDispatchGroup()
        group.enter()
        group.enter()
        let waiters = (0..<2).map { _ in Task { try await group.finished() } }
        let suspended = await eventually { group.asyncWaiterCount == 2 }
        XCTAssertTrue(suspended)
        group.leave()
        // One leave is not zero: both stay suspended.
        XCTAssertEqual(group.asyncWaiterCount, 2)
        group.leave()
        for (i, waiter) in waiters.enumerated() { assertSucceeded(await outcome(of: waiter), "group waiter \(i)") }
        XCTAssertEqual(group.asyncWaiterCount, 0)
        // Zero now: at once, even in a cancelled task.
        let late = Task {
            cancelCurrentTask()
            try await group.finished()
        }
        assertSucceeded(await outcome(of: late), "finished() of an empty group")
    }

    func testGroupFinishedResumesWithTheBlocksOfTheGroup() async {
        let group = TKDispatchGroup()
        let count = stress(1_000)
        let done = JudgedCounter()
        let gate = DispatchSemaphore(value: 0)
        let queue = TKDispatchQueue.global()
        queue.async(group: group) { gate.wait() }
        for _ in 0..<count { queue.async(group: group) { done.add() } }
        let waiter = Task {
            try await group.finished()
            XCTAssertEqual(done.count, count, "resumed before every block ran")
        }
        let suspended = await eventually { group.asyncWaiterCount == 1 }
        XCTAssertTrue(suspended)
        gate.signal()
        assertSucceeded(await outcome(of: waiter), "finished() of a group of blocks")
    }

    func testGroupFinishedCancelledBeforeAndDuringTheWaitThrows() async {
        let group = TKDispatchGroup()
        group.enter()
        let before = Task {
            cancelCurrentTask()
            try await group.finished()
        }
        assertCancelled(await outcome(of: before), "cancelled before")
        let during = Task { try await group.finished() }
        let stays = Task { try await group.finished() }
        let suspended = await eventually { group.asyncWaiterCount == 2 }
        XCTAssertTrue(suspended)
        during.cancel()
        assertCancelled(await outcome(of: during), "cancelled during")
        XCTAssertEqual(group.asyncWaiterCount, 1)
        group.leave()
        assertSucceeded(await outcome(of: stays), "the waiter left in place")
        XCTAssertEqual(group.asyncWaiterCount, 0)
    }

    /// A group entered and left over and over while tasks await it: every task waiting at a zero
    /// crossing is resumed by it (none is lost between the count check and the registration).
    func testGroupWaitersAreNeverLostAcrossZeroCrossings() async {
        let group = TKDispatchGroup()
        let rounds = stress(500)
        for _ in 0..<rounds {
            group.enter()
            let waiter = Task { try await group.finished() }
            let leaver = TestThread { group.leave() }
            assertSucceeded(await outcome(of: waiter), "a waiter racing the zero crossing")
            XCTAssertTrue(leaver.join())
        }
        XCTAssertEqual(group.asyncWaiterCount, 0)
    }
}
