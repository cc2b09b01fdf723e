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
        // never lets more than `width` of them run at once. Each item writes its own start and end
        // into its own slot, and the most that overlapped is counted afterwards: a shared counter
        // would make the items contend, and under ThreadSanitizer a contended atomic can put a
        // thread to sleep in the sanitizer's own lock, a real block the monitor would rightly
        // compensate.
        let count = 3 * cores
        let spans = Spans(count)
        defer { spans.storage.deallocate() }
        let group = DispatchGroup()
        for i in 0..<count {
            group.enter()
            TKDispatchQueue.global().async {
                let start = ContinuousClock.now
                let end = start + .milliseconds(30)
                var now = start
                while now < end { now = ContinuousClock.now }
                spans.storage[i] = (start, now)
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        // Sweep the starts and ends in time order; at equal instants an end goes first.
        var events: [(at: ContinuousClock.Instant, step: Int)] = []
        for span in spans.storage {
            events.append((span.start, 1))
            events.append((span.end, -1))
        }
        events.sort { a, b in a.at < b.at || (a.at == b.at && a.step < b.step) }
        var active = 0
        var maxActive = 0
        for event in events {
            active += event.step
            maxActive = max(maxActive, active)
        }
        XCTAssertLessThanOrEqual(maxActive, cores)
    }

    /// One (start, end) slot per item. safety: each item writes only its own slot, and the test
    /// reads them after `group.wait()`, which orders every item's write before the read.
    private final class Spans: @unchecked Sendable {
        let storage: UnsafeMutableBufferPointer<(start: ContinuousClock.Instant, end: ContinuousClock.Instant)>
        init(_ count: Int) {
            storage = .allocate(capacity: count)
            storage.initialize(repeating: (.now, .now))
        }
    }

    func testAStallNeedsTwoBlockedLooksWithoutCPUTimeBetween() {
        typealias Look = DispatchPool.ThreadLook
        typealias Waiting = DispatchPool.BlockedLook
        let cases: [(earlier: Waiting?, word: UInt64, now: Look, stalled: Bool, why: String)] = [
            (nil, 6, Look(blocked: true, cpuTime: 100), false, "one blocked look is not enough"),
            (Waiting(word: 6, cpuTime: 100), 6, Look(blocked: true, cpuTime: 100), true, "blocked twice, no CPU between"),
            (Waiting(word: 6, cpuTime: 100), 6, Look(blocked: true, cpuTime: 180), false, "it ran between the looks"),
            (Waiting(word: 6, cpuTime: 100), 6, Look(blocked: false, cpuTime: 100), false, "runnable now"),
            (Waiting(word: 2, cpuTime: 100), 6, Look(blocked: true, cpuTime: 100), false, "the earlier look was another job"),
            (Waiting(word: 6, cpuTime: nil), 6, Look(blocked: true, cpuTime: nil), true, "no schedstat: two blocked looks"),
            (Waiting(word: 6, cpuTime: 100), 6, Look(blocked: true, cpuTime: nil), false, "CPU time unknown now"),
        ]
        for c in cases {
            XCTAssertEqual(DispatchPool.confirmsStall(earlier: c.earlier, word: c.word, now: c.now), c.stalled, c.why)
        }
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
        XCTAssertFalse(DispatchPool.threadIsBlocked(UInt32(KernelThread.currentID())), "the calling thread is running")
        XCTAssertFalse(DispatchPool.threadIsBlocked(0))
        // A thread parked in a Foundation semaphore sleeps (S) in futex(2).
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
                return tid != 0 && DispatchPool.threadIsBlocked(tid)
            })
        parked.signal()
    }

    func testOnlyASleepInsideASystemCallCountsAsBlocked() throws {
        #if arch(x86_64)
            let (futex, mmap, munmap) = (202, 9, 11)
        #elseif arch(arm64)
            let (futex, mmap, munmap) = (98, 222, 215)
        #else
            throw XCTSkip("system call numbers of this architecture are not in the table")
        #endif
        let cases: [(file: String?, blocked: Bool, why: String)] = [
            ("\(futex) 0x7f01 0x80 0x0 0x0 0x0 0x0 0x7ffd10 0x7f4c21\n", true, "futex(2)"),
            ("-1 0x7f4bff5fd650 0x55cbde4c8031\n", false, "a page fault: asleep outside any system call"),
            ("\(mmap) 0x0 0x40000 0x3 0x22 0xffffffffffffffff 0x0 0x7f82 0x55ca\n", false, "mmap(2)"),
            ("\(munmap) 0x7f82 0x40000 0x0 0x0 0x0 0x0 0x7f82 0x55ca\n", false, "munmap(2)"),
            ("0 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd10 0x7f4c21\n", true, "system call 0 (read(2) or io_setup)"),
            ("running\n", false, "it runs again"),
            (nil, true, "no syscall file: any sleep counts"),
            ("", true, "nothing readable: any sleep counts"),
        ]
        for c in cases {
            XCTAssertEqual(DispatchPool.sleepsInASystemCall(c.file), c.blocked, c.why)
        }
    }

    func testTheThreadCPUTimeIsReadFromProc() throws {
        XCTAssertNil(DispatchPool.threadCPUTime(0))
        let me = UInt32(KernelThread.currentID())
        guard let first = DispatchPool.threadCPUTime(me) else {
            throw XCTSkip("this kernel keeps no /proc/self/task/TID/schedstat: the monitor goes by two waiting looks")
        }
        // The calling thread runs: its CPU time grows (the kernel updates it at its next tick).
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { (DispatchPool.threadCPUTime(me) ?? 0) > first })
    }
}
