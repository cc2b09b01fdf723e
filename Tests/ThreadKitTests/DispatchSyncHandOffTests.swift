// `sync` runs the block on the caller's thread whenever libdispatch would (issue 12): a contended
// sync waits in the queue's FIFO and is handed the queue by its drainer, on serial queues, on
// concurrent queues (plain and barrier), up a target chain, and with 8 threads behind a barrier.
// Judged by kernel thread ids read from /proc, a pthread-mutex record of order and overlap, and
// /proc's view of which threads are parked (to know a caller waits before releasing the queue).
// The hand-off is done by the thread that makes room, never by a pool worker that must be free.
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

final class DispatchSyncHandOffTests: XCTestCase {
    /// The caller's thread id and the id of the thread the block ran on.
    private struct Ran: Equatable {
        let caller: Int32
        let block: Int32
    }

    func testAContendedSyncRunsOnTheCallersThread() {
        let queue = TKDispatchQueue(label: "contended")
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }
        let me = KernelThread.currentID()
        let releaser = TestThread {
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { KernelThread.isParkedInFutex(me) })
            gate.signal()
        }
        let ranOn = queue.sync { KernelThread.currentID() }
        XCTAssertEqual(ranOn, me)
        XCTAssertTrue(releaser.join())
    }

    func testAContendedSyncKeepsFIFOOrderAndRunsOnItsThread() {
        let queue = TKDispatchQueue(label: "fifo")
        let gate = DispatchSemaphore(value: 0)
        let log = Guarded<[String]>([])
        queue.async {
            gate.wait()
            log.withLock { $0.append("first") }
        }
        queue.async { log.withLock { $0.append("A") } }
        let ran = Guarded<Ran?>(nil)
        let caller = TestThread {
            let me = KernelThread.currentID()
            queue.sync {
                log.withLock { $0.append("sync") }
                ran.withLock { $0 = Ran(caller: me, block: KernelThread.currentID()) }
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { caller.isParked })
        let done = DispatchSemaphore(value: 0)
        queue.async {
            log.withLock { $0.append("B") }
            done.signal()
        }
        gate.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(caller.join())
        XCTAssertEqual(log.withLock { $0 }, ["first", "A", "sync", "B"])
        let r = ran.withLock { $0 }
        XCTAssertNotNil(r)
        XCTAssertEqual(r?.block, r?.caller)
    }

    func testAContendedBarrierSyncRunsAloneOnTheCallersThread() {
        let queue = TKDispatchQueue(label: "barrier-handoff", attributes: .concurrent)
        let gate = DispatchSemaphore(value: 0)
        // The judge: blocks may overlap one another (the queue is concurrent), never the barrier.
        // Each side announces itself, then looks at the other (sequentially consistent, as in
        // Dekker's protocol: one of any two overlapping sides sees the other).
        let blocksInside = Atomic<Int>(0)
        let barrierInside = Atomic<Bool>(false)
        let overlaps = JudgedCounter()
        let finished = DispatchGroup()
        finished.enter()
        queue.async {
            gate.wait()
            finished.leave()
        } // in flight: the barrier must wait for it
        let me = KernelThread.currentID()
        let releaser = TestThread {
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { KernelThread.isParkedInFutex(me) })
            // Submitted behind the waiting barrier: none may start until it has finished.
            for _ in 0..<8 {
                finished.enter()
                queue.async {
                    blocksInside.wrappingAdd(1, ordering: .sequentiallyConsistent)
                    if barrierInside.load(ordering: .sequentiallyConsistent) { overlaps.add() }
                    blocksInside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
                    finished.leave()
                }
            }
            gate.signal()
        }
        let ranOn = queue.sync(flags: .barrier) { () -> Int32 in
            barrierInside.store(true, ordering: .sequentiallyConsistent)
            if blocksInside.load(ordering: .sequentiallyConsistent) != 0 { overlaps.add() }
            usleep(2_000)
            if blocksInside.load(ordering: .sequentiallyConsistent) != 0 { overlaps.add() }
            barrierInside.store(false, ordering: .sequentiallyConsistent)
            return KernelThread.currentID()
        }
        XCTAssertEqual(ranOn, me)
        XCTAssertTrue(releaser.join())
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(overlaps.count, 0, "a block overlapped the barrier")
    }

    /// libdispatch's contended-sync shape: 8 threads sync onto a concurrent queue held by a barrier.
    func testEightThreadsBehindABarrierEachRunOnTheirOwnThread() {
        let queue = TKDispatchQueue(label: "behind-barrier", attributes: .concurrent)
        let gate = DispatchSemaphore(value: 0)
        let barrierDone = Atomic<Bool>(false)
        queue.async(flags: .barrier) {
            gate.wait()
            barrierDone.store(true, ordering: .releasing)
        }
        let results = Guarded<[Ran]>([])
        let early = JudgedCounter()
        let callers = (0..<8).map { i in
            TestThread("sync-\(i)") {
                let me = KernelThread.currentID()
                let block = queue.sync { () -> Int32 in
                    if !barrierDone.load(ordering: .acquiring) { early.add() }
                    return KernelThread.currentID()
                }
                results.withLock { $0.append(Ran(caller: me, block: block)) }
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { callers.allSatisfy { $0.isParked } })
        gate.signal()
        XCTAssertTrue(joinAll(callers))
        let all = results.withLock { $0 }
        XCTAssertEqual(all.count, 8)
        for r in all { XCTAssertEqual(r.block, r.caller) }
        XCTAssertEqual(early.count, 0, "a sync block ran before the barrier finished")
    }

    func testAContendedSyncUpATargetChainHoldsEveryLevelOnTheCallersThread() {
        let outer = TKDispatchQueue(label: "outer")
        let inner = TKDispatchQueue(label: "inner", target: outer)
        let gate = DispatchSemaphore(value: 0)
        let inside = Atomic<Int>(0)
        let overlaps = JudgedCounter()
        let finished = DispatchGroup()
        @Sendable func exclusive(_ body: () -> Void = {}) {
            if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlaps.add() }
            body()
            inside.wrappingSubtract(1, ordering: .relaxed)
        }
        finished.enter()
        outer.async {
            gate.wait()
            finished.leave()
        }
        for i in 0..<20 {
            finished.enter()
            (i.isMultiple(of: 2) ? outer : inner).async {
                exclusive()
                finished.leave()
            }
        }
        let me = KernelThread.currentID()
        let releaser = TestThread {
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { KernelThread.isParkedInFutex(me) })
            for i in 0..<20 {
                finished.enter()
                (i.isMultiple(of: 2) ? outer : inner).async {
                    exclusive()
                    finished.leave()
                }
            }
            gate.signal()
        }
        let ranOn = inner.sync { () -> Int32 in
            var id: Int32 = 0
            exclusive {
                usleep(1_000)
                id = KernelThread.currentID()
            }
            return id
        }
        XCTAssertEqual(ranOn, me)
        XCTAssertTrue(releaser.join())
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(overlaps.count, 0, "the sync block overlapped another block of its chain")
    }

    func testContendedSyncsFromManyThreadsEachRunOnTheCallerInOrderWithAsyncs() {
        let queue = TKDispatchQueue(label: "many-sync")
        let counter = Shared(0) // touched only on the queue
        let wrongThread = JudgedCounter()
        let rounds = stress(2_000)
        let workers = TestThread.spawn(4, "syncer") { i in
            let me = KernelThread.currentID()
            for r in 0..<rounds {
                if (r + i).isMultiple(of: 3) { queue.async { counter.value += 1 } }
                queue.sync {
                    counter.value += 1
                    if KernelThread.currentID() != me { wrongThread.add() }
                }
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
        let expectedAsyncs = (0..<4).reduce(0) { sum, i in sum + (0..<rounds).filter { ($0 + i).isMultiple(of: 3) }.count }
        XCTAssertEqual(queue.sync { counter.value }, 4 * rounds + expectedAsyncs)
        XCTAssertEqual(wrongThread.count, 0, "a sync block ran on another thread")
    }

    /// Every pool worker is busy (spinning until the sync block runs) when a barrier held inline
    /// by another thread ends: that thread must hand the queue to the waiting caller itself; a
    /// token for a pool worker would never run.
    func testAHandOffNeedsNoFreePoolWorker() {
        let width = DispatchPool.shared.width
        let queue = TKDispatchQueue(label: "no-free-worker", attributes: .concurrent)
        let gate = DispatchSemaphore(value: 0)
        let released = Atomic<Bool>(false)
        let spinning = Atomic<Int>(0)
        let barrierRunning = Flag()
        let barrierThread = TestThread {
            queue.sync(flags: .barrier) {
                barrierRunning.set()
                gate.wait()
            }
        }
        XCTAssertTrue(barrierRunning.wait())
        let ranOnCaller = Flag()
        let caller = TestThread {
            let me = KernelThread.currentID()
            queue.sync {
                if KernelThread.currentID() == me { ranOnCaller.set() }
                released.store(true, ordering: .relaxed)
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { caller.isParked })
        for _ in 0..<width {
            TKDispatchQueue.global().async {
                spinning.wrappingAdd(1, ordering: .relaxed)
                while !released.load(ordering: .relaxed) { sched_yield() }
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { spinning.load(ordering: .relaxed) == width })
        gate.signal()
        XCTAssertTrue(caller.join(until: .now + .seconds(20)), "the sync caller was never handed the queue")
        released.store(true, ordering: .relaxed)
        XCTAssertTrue(barrierThread.join())
        XCTAssertTrue(ranOnCaller.isSet)
    }
}
