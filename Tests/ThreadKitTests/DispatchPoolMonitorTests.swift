// Workers blocked outside ThreadKit (issue 12): items blocked in a plain read(2), which the pool's
// parking observer never sees, no longer hold up the work behind them: the pool's monitor notices
// a worker that made no progress for a tick while its thread sleeps, and lets another run, within
// the hard cap. Judged by Foundation's DispatchSemaphore and by the pipe itself (the item that
// releases the readers is queued behind them), never by the pool's own counts alone. Also: a
// continuation left on the local queue of a job that spins (never parks) still runs elsewhere.
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

final class DispatchPoolMonitorTests: XCTestCase {
    private var cores: Int { DispatchPool.shared.width }

    func testItemsBlockedInReadDoNotHoldUpTheItemThatReleasesThem() {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let readers = max(8, 4 * cores)
        let done = DispatchSemaphore(value: 0)
        let readBytes = Atomic<Int>(0)
        let (readEnd, writeEnd) = (fds[0], fds[1])
        for _ in 0..<readers {
            TKDispatchQueue.global().async {
                var byte: UInt8 = 0
                if read(readEnd, &byte, 1) == 1 { readBytes.wrappingAdd(1, ordering: .relaxed) }
                done.signal()
            }
        }
        // Queued behind every reader: it runs only if the pool lets another worker past them.
        TKDispatchQueue.global().async {
            let bytes = [UInt8](repeating: 7, count: readers)
            _ = bytes.withUnsafeBytes { write(writeEnd, $0.baseAddress, readers) }
            done.signal()
        }
        for i in 0...readers {
            XCTAssertEqual(
                done.wait(timeout: .now() + 30), .success,
                "item \(i) of \(readers + 1) never finished: the pool did not look past workers blocked in read(2)")
        }
        XCTAssertEqual(readBytes.load(ordering: .relaxed), readers)
        XCTAssertLessThanOrEqual(DispatchPool.shared.snapshot().threads, DispatchPool.shared.threadCap)
        // Every stalled worker counts as running again once its job ends, and the tier comes to rest.
        XCTAssertTrue(
            waitUntil(.now + .seconds(10)) {
                let s = DispatchPool.shared.snapshot()
                return s.running == 0 && s.stalled == 0 && s.blocked == 0 && s.idle == s.threads
            }, "the pool did not come to rest: \(DispatchPool.shared.snapshot())")
    }

    func testABatchTakenWithABlockedItemIsHandedToAnotherWorker() {
        // Enough items that a worker takes several at a time (a batch): the first blocks in read(2)
        // until the last item, which sits in somebody's batch or the run queue, writes.
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        let done = DispatchSemaphore(value: 0)
        let total = 64 * cores
        for i in 0..<total {
            TKDispatchQueue.global().async {
                if i == 0 {
                    var byte: UInt8 = 0
                    _ = read(readEnd, &byte, 1)
                } else if i == total - 1 {
                    var byte: UInt8 = 1
                    _ = write(writeEnd, &byte, 1)
                }
                done.signal()
            }
        }
        for _ in 0..<total { XCTAssertEqual(done.wait(timeout: .now() + 30), .success) }
    }

    func testWorkersBusyOnTheCPUAreNotCountedStalled() {
        // Long CPU-bound items are runnable, not waiting: the monitor takes their batches back but
        // never lets more than `width` of them run at once.
        let active = Atomic<Int>(0)
        let maxActive = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<(3 * cores) {
            group.enter()
            TKDispatchQueue.global().async {
                let now = active.wrappingAdd(1, ordering: .relaxed).newValue
                var m = maxActive.load(ordering: .relaxed)
                while now > m, !maxActive.compareExchange(expected: m, desired: now, ordering: .relaxed).exchanged {
                    m = maxActive.load(ordering: .relaxed)
                }
                let end = ContinuousClock.now + .milliseconds(30)
                while ContinuousClock.now < end {}
                active.wrappingSubtract(1, ordering: .relaxed)
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertLessThanOrEqual(maxActive.load(ordering: .relaxed), cores)
    }

    func testAContinuationOnTheLocalQueueOfABusyJobStillRuns() {
        // A job submits a continuation (which goes to its own worker's local queue) and then spins,
        // never parking, until the continuation has run: another worker must get it (the monitor
        // hands the local queue of a worker without progress to the run queues).
        let done = DispatchSemaphore(value: 0)
        let ran = Atomic<Bool>(false)
        let sawIt = Atomic<Bool>(false)
        TKDispatchQueue.global().async {
            TKDispatchQueue.global().async { ran.store(true, ordering: .releasing) }
            let deadline = ContinuousClock.now + .seconds(20)
            while !ran.load(ordering: .acquiring) && ContinuousClock.now < deadline {}
            sawIt.store(ran.load(ordering: .acquiring), ordering: .relaxed)
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(sawIt.load(ordering: .relaxed), "the continuation waited for the job that submitted it")
        // The same with a serial queue's lane, submitted from a serial queue.
        let a = TKDispatchQueue(label: "a")
        let b = TKDispatchQueue(label: "b")
        let ranB = Atomic<Bool>(false)
        let sawB = Atomic<Bool>(false)
        a.async {
            b.async { ranB.store(true, ordering: .releasing) }
            let deadline = ContinuousClock.now + .seconds(20)
            while !ranB.load(ordering: .acquiring) && ContinuousClock.now < deadline {}
            sawB.store(ranB.load(ordering: .acquiring), ordering: .relaxed)
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(sawB.load(ordering: .relaxed), "queue b's lane waited for the job on queue a that submitted it")
    }

    func testTheThreadStateIsReadFromProc() {
        XCTAssertFalse(DispatchPool.threadIsWaiting(UInt32(KernelThread.currentID())), "the calling thread is running")
        XCTAssertFalse(DispatchPool.threadIsWaiting(0))
        // A thread parked in a Foundation semaphore sleeps (S).
        let parked = DispatchSemaphore(value: 0)
        let tidBox = Atomic<UInt32>(0)
        let thread = Thread {
            tidBox.store(UInt32(KernelThread.currentID()), ordering: .relaxed)
            parked.wait()
        }
        thread.start()
        XCTAssertTrue(
            waitUntil(.now + .seconds(10)) {
                let tid = tidBox.load(ordering: .relaxed)
                return tid != 0 && DispatchPool.threadIsWaiting(tid)
            })
        parked.signal()
    }
}
