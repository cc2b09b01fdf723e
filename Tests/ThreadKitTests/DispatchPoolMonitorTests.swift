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

    /// The blocked-worker rule, without threads (RunnableWindow.judge): a running worker counts
    /// stalled when its thread was runnable for less than half a window and is blocked at the
    /// window's end; a stalled one counts running again when it was runnable for half a window.
    func testAWorkerIsJudgedByItsRunnableShareOfAWindow() {
        typealias Window = DispatchPool.RunnableWindow
        typealias Look = DispatchPool.ThreadLook
        let length = Window.length
        let open = Window(word: 6, openedAt: 1_000, length: length, opening: Look(blocked: true, runnable: 50_000))
        let end = 1_000 + length
        let cases: [(window: Window?, word: UInt64, now: UInt64, look: Look, verdict: Window.Verdict, why: String)] = [
            (nil, 6, 500, Look(blocked: true, runnable: 0), .keep, "the first look only opens a window"),
            (open, 6, end - 1, Look(blocked: true, runnable: 50_000), .keep, "the window is still open"),
            (open, 6, end, Look(blocked: true, runnable: 50_000 + length / 100), .stall, "a sleep loop: runnable 1%"),
            (open, 6, end, Look(blocked: true, runnable: 50_000 + length / 2 - 1), .stall, "runnable just under half"),
            (open, 6, end, Look(blocked: true, runnable: 50_000 + length / 2), .keep, "runnable half the window"),
            (open, 6, end, Look(blocked: false, runnable: 50_000), .keep, "mostly blocked but running at the end"),
            (open, 6, end, Look(blocked: true, runnable: 50_000 + length), .keep, "on a CPU or its run queue throughout"),
            (open, 10, end, Look(blocked: true, runnable: 50_000), .keep, "another job since the window opened"),
            (
                Window(word: 6, openedAt: 1_000, length: length, opening: Look(blocked: true, runnable: nil)), 6, end,
                Look(blocked: true, runnable: nil), .stall, "no schedstat: blocked at both ends"
            ),
            (
                Window(word: 6, openedAt: 1_000, length: length, opening: Look(blocked: false, runnable: nil)), 6, end,
                Look(blocked: true, runnable: nil), .keep, "no schedstat: running when the window opened"
            ),
            (
                Window(word: 7, openedAt: 1_000, length: length, opening: Look(blocked: true, runnable: 0)), 7, end,
                Look(blocked: true, runnable: length / 10), .keep, "stalled and still mostly blocked"
            ),
            (
                Window(word: 7, openedAt: 1_000, length: length, opening: Look(blocked: true, runnable: 0)), 7, end,
                Look(blocked: true, runnable: length * 3 / 4), .unstall, "stalled, runnable most of the window"
            ),
        ]
        for c in cases {
            let (verdict, next) = Window.judge(c.window, word: c.word, now: c.now, look: c.look)
            XCTAssertEqual(verdict, c.verdict, c.why)
            switch verdict {
            case .stall: XCTAssertEqual(next.word, c.word | 1, c.why)
            case .unstall: XCTAssertEqual(next.word, c.word & ~1, c.why)
            case .keep: XCTAssertEqual(next.word, c.word, c.why)
            }
            XCTAssertLessThanOrEqual(next.openedAt, c.now, c.why)
        }
        // A worker that stays stalled is looked at half as often each time, up to the maximum.
        var window = Window(word: 7, openedAt: 0, length: length, opening: Look(blocked: true, runnable: 0))
        var lengths: [UInt64] = []
        for _ in 0..<10 {
            let (verdict, next) = Window.judge(window, word: 7, now: window.closesAt, look: Look(blocked: true, runnable: 0))
            XCTAssertEqual(verdict, .keep)
            lengths.append(next.length)
            window = next
        }
        XCTAssertEqual(lengths.prefix(3), [2 * length, 4 * length, 8 * length])
        XCTAssertEqual(lengths.last, Window.maximumLength)
    }

    /// A job that sleeps in 1 ms steps (a usleep loop: never one long system call) holds no worker
    /// of the pool: CPUs × 4 such jobs, each waiting until all of them run, all run at once.
    func testJobsThatSleepInShortStepsStillLetThePoolGrow() {
        let sleepers = 4 * cores
        let running = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let sawAll = Atomic<Int>(0)
        for _ in 0..<sleepers {
            TKDispatchQueue.global().async {
                running.wrappingAdd(1, ordering: .relaxed)
                let deadline = ContinuousClock.now + .seconds(30)
                while running.load(ordering: .relaxed) < sleepers && ContinuousClock.now < deadline { usleep(1_000) }
                if running.load(ordering: .relaxed) >= sleepers { sawAll.wrappingAdd(1, ordering: .relaxed) }
                done.signal()
            }
        }
        for _ in 0..<sleepers { XCTAssertEqual(done.wait(timeout: .now() + 90), .success) }
        XCTAssertEqual(sawAll.load(ordering: .relaxed), sleepers, "some sleepers never saw all \(sleepers) running together")
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

    func testTheThreadRunnableTimeIsReadFromProc() throws {
        XCTAssertNil(DispatchPool.threadRunnableTime(0))
        let me = UInt32(KernelThread.currentID())
        guard let first = DispatchPool.threadRunnableTime(me) else {
            throw XCTSkip("this kernel keeps no /proc/self/task/TID/schedstat: the monitor goes by blocked looks alone")
        }
        // The calling thread runs: its runnable time grows (the kernel updates it at its next tick).
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { (DispatchPool.threadRunnableTime(me) ?? 0) > first })
    }
}
