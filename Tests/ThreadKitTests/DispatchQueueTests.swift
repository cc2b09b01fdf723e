// TKDispatchQueue: FIFO, serial exclusion, concurrent overlap, barriers, sync (inline and slow),
// targets, suspend/resume, inactive queues, specifics, asyncAfter never early, the main queue.
// Completion is judged with Foundation's DispatchSemaphore/DispatchGroup and a pthread-mutex counter,
// independent of ThreadKit; every wait has a deadline.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchQueueTests: XCTestCase {
    // MARK: Serial queues

    func testASerialQueueRunsItsBlocksOneAtATimeInOrder() {
        let queue = TKDispatchQueue(label: "serial")
        let order = Shared<[Int]>([]) // touched only by the queue's blocks
        let inside = Atomic<Int>(0)
        let overlap = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let n = stress(10_000)
        for i in 0..<n {
            queue.async {
                if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlap.wrappingAdd(1, ordering: .relaxed) }
                order.value.append(i)
                inside.wrappingSubtract(1, ordering: .relaxed)
                if i == n - 1 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(overlap.load(ordering: .relaxed), 0)
        XCTAssertEqual(order.value, Array(0..<n))
    }

    func testSyncReturnsTheValueAndRunsAfterEarlierBlocks() {
        let queue = TKDispatchQueue(label: "sync-order")
        let log = Shared<[Int]>([])
        for i in 0..<100 { queue.async { log.value.append(i) } }
        let count = queue.sync { log.value.count }
        XCTAssertEqual(count, 100)
        XCTAssertEqual(queue.sync { 42 }, 42)
    }

    func testSyncOnAnIdleQueueRunsOnTheCallersThread() {
        let queue = TKDispatchQueue(label: "inline")
        let me = KernelThread.currentID()
        let ranOn = queue.sync { KernelThread.currentID() }
        XCTAssertEqual(ranOn, me)
    }

    func testSyncRethrowsTheBlocksError() {
        struct Boom: Error {}
        let queue = TKDispatchQueue(label: "throws")
        XCTAssertThrowsError(try queue.sync { throw Boom() }) { XCTAssertTrue($0 is Boom) }
        // The slow path (queue busy) rethrows too.
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }
        let t = TestThread { gate.signal() }
        XCTAssertThrowsError(try queue.sync { throw Boom() }) { XCTAssertTrue($0 is Boom) }
        t.join()
    }

    func testSyncWhileTheQueueIsBusyWaitsForEarlierBlocks() {
        let queue = TKDispatchQueue(label: "busy")
        let gate = DispatchSemaphore(value: 0)
        let log = Shared<[String]>([])
        queue.async {
            gate.wait()
            log.value.append("first")
        }
        // Released once the main thread is parked in sync behind the first block.
        let mainThread = getpid()
        let releaser = TestThread {
            waitUntil(.now + .seconds(30)) { KernelThread.isParkedInFutex(mainThread) }
            gate.signal()
        }
        queue.sync { log.value.append("sync") }
        XCTAssertEqual(log.value, ["first", "sync"])
        releaser.join()
    }

    // MARK: Concurrent queues and barriers

    func testAConcurrentQueueRunsBlocksTogether() {
        let queue = TKDispatchQueue(label: "concurrent", attributes: .concurrent)
        let both = DispatchGroup()
        let arrived = SpinBarrier(parties: 2)
        let met = Atomic<Int>(0)
        for _ in 0..<2 {
            both.enter()
            queue.async {
                if arrived.arriveAndWait(deadline: .now + .seconds(20)) { met.wrappingAdd(1, ordering: .relaxed) }
                both.leave()
            }
        }
        XCTAssertEqual(both.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(met.load(ordering: .relaxed), 2, "two blocks of a concurrent queue did not run at the same time")
    }

    func testABarrierRunsAloneAfterEarlierBlocksAndBeforeLaterOnes() {
        let queue = TKDispatchQueue(label: "barrier", attributes: .concurrent)
        let inside = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        let log = JudgedCounter()
        let before = Atomic<Int>(0)
        let after = Atomic<Int>(0)
        let seenBefore = Atomic<Int>(-1)
        let seenAfter = Atomic<Int>(-1)
        let done = DispatchGroup()
        for _ in 0..<200 {
            done.enter()
            queue.async {
                inside.wrappingAdd(1, ordering: .relaxed)
                before.wrappingAdd(1, ordering: .relaxed)
                inside.wrappingSubtract(1, ordering: .relaxed)
                done.leave()
            }
        }
        done.enter()
        queue.async(flags: .barrier) {
            if inside.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
            seenBefore.store(before.load(ordering: .relaxed), ordering: .relaxed)
            seenAfter.store(after.load(ordering: .relaxed), ordering: .relaxed)
            log.add()
            done.leave()
        }
        for _ in 0..<200 {
            done.enter()
            queue.async {
                after.wrappingAdd(1, ordering: .relaxed)
                done.leave()
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(violations.load(ordering: .relaxed), 0)
        XCTAssertEqual(seenBefore.load(ordering: .relaxed), 200)
        XCTAssertEqual(seenAfter.load(ordering: .relaxed), 0)
        XCTAssertEqual(log.count, 1)
    }

    func testBarrierSyncSeesAllEarlierWrites() {
        let queue = TKDispatchQueue(label: "barrier-sync", attributes: .concurrent)
        let counter = Atomic<Int>(0)
        for _ in 0..<1_000 { queue.async { counter.wrappingAdd(1, ordering: .relaxed) } }
        let seen = queue.sync(flags: .barrier) { counter.load(ordering: .relaxed) }
        XCTAssertEqual(seen, 1_000)
    }

    // MARK: Targets

    func testQueuesTargetingOneSerialQueueNeverOverlap() {
        let root = TKDispatchQueue(label: "root")
        let children = (0..<8).map { TKDispatchQueue(label: "child-\($0)", attributes: $0 % 2 == 0 ? [] : .concurrent, target: root) }
        let inside = Atomic<Int>(0)
        let overlap = Atomic<Int>(0)
        let done = DispatchGroup()
        for i in 0..<stress(8_000) {
            done.enter()
            children[i % 8].async {
                if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlap.wrappingAdd(1, ordering: .relaxed) }
                inside.wrappingSubtract(1, ordering: .relaxed)
                done.leave()
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(overlap.load(ordering: .relaxed), 0)
    }

    func testGetSpecificFindsTheRunningQueueAndItsTargets() {
        let key = TKDispatchSpecificKey<String>()
        let other = TKDispatchSpecificKey<Int>()
        let parent = TKDispatchQueue(label: "parent")
        let child = TKDispatchQueue(label: "child", target: parent)
        parent.setSpecific(key: key, value: "parent")
        child.setSpecific(key: other, value: 7)
        XCTAssertEqual(parent.getSpecific(key: key), "parent")
        XCTAssertNil(child.getSpecific(key: key), "the instance method looks at the queue only")
        XCTAssertNil(TKDispatchQueue.getSpecific(key: other), "outside any queue")
        let seen = Shared<(String?, Int?)>((nil, nil))
        let done = DispatchSemaphore(value: 0)
        child.async {
            seen.value = (TKDispatchQueue.getSpecific(key: key), TKDispatchQueue.getSpecific(key: other))
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(seen.value.0, "parent")
        XCTAssertEqual(seen.value.1, 7)
        XCTAssertEqual(child.sync { TKDispatchQueue.getSpecific(key: other) }, 7)
        parent.setSpecific(key: key, value: nil)
        XCTAssertNil(parent.getSpecific(key: key))
    }

    // MARK: Suspend, resume, activate

    func testASuspendedQueueStartsNothingUntilResumed() {
        let queue = TKDispatchQueue(label: "suspended")
        let ran = Atomic<Int>(0)
        queue.suspend()
        queue.suspend()
        for _ in 0..<10 { queue.async { ran.wrappingAdd(1, ordering: .relaxed) } }
        usleep(20_000) // a "never" check: nothing may run while suspended
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        queue.resume()
        usleep(20_000)
        XCTAssertEqual(ran.load(ordering: .relaxed), 0, "still suspended once")
        queue.resume()
        XCTAssertEqual(queue.sync { ran.load(ordering: .relaxed) }, 10)
    }

    func testAnInitiallyInactiveQueueRunsOnlyAfterActivate() {
        let queue = TKDispatchQueue(label: "inactive", attributes: [.initiallyInactive, .concurrent])
        let ran = Atomic<Int>(0)
        for _ in 0..<5 { queue.async { ran.wrappingAdd(1, ordering: .relaxed) } }
        usleep(20_000)
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        queue.activate()
        queue.sync(flags: .barrier) {}
        XCTAssertEqual(ran.load(ordering: .relaxed), 5)
        queue.activate() // no effect the second time
    }

    func testSuspendResumeTogglesWhileSubmittingLoseNothing() {
        let queue = TKDispatchQueue(label: "toggles")
        let counter = JudgedCounter()
        let n = stress(10_000)
        let submitter = TestThread { for _ in 0..<n { queue.async { counter.add() } } }
        for _ in 0..<n {
            queue.suspend()
            queue.resume()
        }
        XCTAssertTrue(submitter.join())
        queue.sync {}
        XCTAssertEqual(counter.count, n)
    }

    // MARK: asyncAfter

    func testAsyncAfterNeverRunsEarly() {
        let queue = TKDispatchQueue(label: "after", attributes: .concurrent)
        let group = DispatchGroup()
        let early = Atomic<Int>(0)
        for i in 0..<50 {
            let deadline = ContinuousClock.now + .milliseconds(i % 10 + 1)
            group.enter()
            queue.asyncAfter(deadline: deadline) {
                if ContinuousClock.now < deadline { early.wrappingAdd(1, ordering: .relaxed) }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(early.load(ordering: .relaxed), 0)
    }

    func testAsyncAfterFiresInDeadlineOrder() {
        let queue = TKDispatchQueue(label: "after-order")
        let log = Shared<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let start = ContinuousClock.now
        for i in (0..<20).reversed() {
            queue.asyncAfter(deadline: start + .milliseconds(5 + i)) {
                log.value.append(i)
                if log.value.count == 20 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(log.value, Array(0..<20))
    }

    // MARK: The main queue

    func testTheMainQueueRunsOnTheMainThreadWhenTheMainLoopRuns() {
        let ranOnMain = Shared<Bool?>(nil)
        TKDispatchQueue.global().async {
            TKDispatchQueue.main.async { ranOnMain.value = TKThread.isMainThread }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while ranOnMain.value == nil && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(50))
        }
        XCTAssertEqual(ranOnMain.value, true)
    }

    func testSyncOntoTheMainQueueFromAWorkerRunsOnTheMainThread() {
        let result = Shared<(Int, Bool)?>(nil)
        let finished = Atomic<Bool>(false)
        TKDispatchQueue.global().async {
            let v = TKDispatchQueue.main.sync { (7, TKThread.isMainThread) }
            result.value = v
            finished.store(true, ordering: .releasing)
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !finished.load(ordering: .acquiring) && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(50))
        }
        XCTAssertEqual(result.value?.0, 7)
        XCTAssertEqual(result.value?.1, true)
    }

    func testGlobalQueuesAreOnePerQoS() {
        XCTAssertTrue(TKDispatchQueue.global() === TKDispatchQueue.global(qos: .default))
        XCTAssertFalse(TKDispatchQueue.global(qos: .background) === TKDispatchQueue.global(qos: .userInteractive))
        XCTAssertEqual(TKDispatchQueue(label: "named").label, "named")
    }
}
