// TKReadWriteLock: readers share, writers exclude, try-lock results per state, unlock releases the
// side held, neither side starves, phase fairness, and a mixed stress with exact counts.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class ReadWriteLockTests: XCTestCase {
    // MARK: Sharing and exclusion

    func testReadersShareTheLock() {
        let lock = TKReadWriteLock()
        let readers = 4
        let witness = NSLock()
        let inside = Shared(0) // guarded by witness
        let sawAll = Atomic<Int>(0)
        let threads = TestThread.spawn(readers) { _ in
            lock.readLock()
            witness.withLock { inside.value += 1 }
            // Every reader stays in until all are in at once: impossible unless readers share.
            if waitUntil(.now + .seconds(20), { witness.withLock { inside.value } == readers }) {
                sawAll.wrappingAdd(1, ordering: .relaxed)
            }
            lock.unlock()
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(60)))
        XCTAssertEqual(sawAll.load(ordering: .relaxed), readers, "\(readers) readers were never inside at the same time")
    }

    func testWritersExcludeReadersAndEachOther() {
        let lock = TKReadWriteLock()
        let readersIn = Atomic<Int>(0)
        let writersIn = Atomic<Int>(0) // independent witnesses
        let violations = Atomic<Int>(0)
        let perThread = stress(100_000)
        let threads = TestThread.spawn(4) { index in
            for i in 0..<perThread {
                if (i + index) % 4 == 0 {
                    lock.writeLock()
                    if writersIn.wrappingAdd(1, ordering: .relaxed).newValue != 1 { violations.wrappingAdd(1, ordering: .relaxed) }
                    if readersIn.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
                    writersIn.wrappingSubtract(1, ordering: .relaxed)
                    lock.unlock()
                } else {
                    lock.readLock()
                    readersIn.wrappingAdd(1, ordering: .relaxed)
                    if writersIn.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
                    readersIn.wrappingSubtract(1, ordering: .relaxed)
                    lock.unlock()
                }
            }
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)))
        XCTAssertEqual(violations.load(ordering: .relaxed), 0, "a writer overlapped a reader or another writer")
    }

    // MARK: Try-lock results

    func testTryLocksSucceedOnAFreeLock() {
        let lock = TKReadWriteLock()
        XCTAssertTrue(lock.tryReadLock())
        lock.unlock()
        XCTAssertTrue(lock.tryWriteLock())
        lock.unlock()
    }

    func testWhileReadHeldTryReadSucceedsAndTryWriteFails() {
        let lock = TKReadWriteLock()
        let holder = Holder(lock, write: false)
        XCTAssertTrue(lock.tryReadLock(), "a second reader must be admitted while only readers hold the lock")
        lock.unlock()
        XCTAssertFalse(lock.tryWriteLock(), "a writer must not get in while a reader holds the lock")
        holder.release()
    }

    func testWhileWriteHeldBothTryLocksFail() {
        let lock = TKReadWriteLock()
        let holder = Holder(lock, write: true)
        XCTAssertFalse(lock.tryReadLock())
        XCTAssertFalse(lock.tryWriteLock())
        holder.release()
        XCTAssertTrue(lock.tryWriteLock(), "released by its writer, the lock must be free")
        lock.unlock()
    }

    func testWaitingWriterBlocksNewReaders() {
        let lock = TKReadWriteLock()
        lock.readLock()
        let writerIn = Atomic<Bool>(false)
        let writer = TestThread("writer") {
            lock.writeLock()
            writerIn.store(true, ordering: .relaxed)
            lock.unlock()
        }
        // Once the writer waits, new readers queue behind it: tryReadLock starts failing.
        let blocked = waitUntil(.now + .seconds(30)) {
            if lock.tryReadLock() {
                lock.unlock()
                return false
            }
            return true
        }
        XCTAssertTrue(blocked, "a new reader was still admitted while a writer waited")
        XCTAssertFalse(writerIn.load(ordering: .relaxed), "the writer got in while a reader held the lock")
        lock.unlock()
        XCTAssertTrue(writer.join(), "the writer was not admitted after the last reader left")
        XCTAssertTrue(writerIn.load(ordering: .relaxed))
    }

    // MARK: Unlock

    func testUnlockReleasesTheReadSide() {
        let lock = TKReadWriteLock()
        lock.readLock()
        lock.readLock()
        lock.unlock()
        XCTAssertFalse(lock.tryWriteLock(), "one unlock of two read locks must leave one reader in")
        lock.unlock()
        XCTAssertTrue(lock.tryWriteLock(), "after both read unlocks the lock must be free")
        lock.unlock()
    }

    func testUnlockReleasesTheWriteSide() {
        let lock = TKReadWriteLock()
        lock.writeLock()
        lock.unlock()
        XCTAssertTrue(lock.tryReadLock(), "after a write unlock a reader must get in")
        lock.unlock()
        XCTAssertTrue(lock.tryWriteLock(), "after a write unlock a writer must get in")
        lock.unlock()
    }

    func testWithReadAndWriteLockReturnTheBodyValueAndRelease() {
        let lock = TKReadWriteLock()
        XCTAssertEqual(lock.withReadLock { 7 }, 7)
        XCTAssertEqual(lock.withWriteLock { "w" }, "w")
        struct Boom: Error {}
        XCTAssertThrowsError(try lock.withWriteLock { () throws -> Int in throw Boom() }) { XCTAssertTrue($0 is Boom) }
        XCTAssertTrue(lock.tryWriteLock(), "a throwing body must release the lock")
        lock.unlock()
    }

    // MARK: Starvation and fairness

    func testWriterIsNotStarvedByContinuousReaders() {
        let lock = TKReadWriteLock()
        let stop = Atomic<Bool>(false)
        let reads = Atomic<Int>(0)
        // Three readers overlapping each other keep the reader count above zero almost always.
        let readers = TestThread.spawn(3, "reader") { _ in
            while !stop.load(ordering: .relaxed) {
                lock.readLock()
                for _ in 0..<50 { reads.wrappingAdd(1, ordering: .relaxed) }
                lock.unlock()
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { reads.load(ordering: .relaxed) > 30_000 })
        let writer = TestThread("writer") {
            lock.writeLock()
            lock.unlock()
        }
        let admitted = writer.join(until: .now + .seconds(30))
        stop.store(true, ordering: .relaxed) // frees the writer if it was starved, so nothing hangs
        XCTAssertTrue(admitted, "a writer waited 30 s behind readers that kept re-acquiring")
        XCTAssertTrue(joinAll(readers + [writer]))
    }

    func testReaderIsNotStarvedByContinuousWriters() {
        let lock = TKReadWriteLock()
        let stop = Atomic<Bool>(false)
        let writes = Atomic<Int>(0)
        let writers = TestThread.spawn(2, "writer") { _ in
            while !stop.load(ordering: .relaxed) {
                lock.writeLock()
                writes.wrappingAdd(1, ordering: .relaxed)
                lock.unlock()
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { writes.load(ordering: .relaxed) > 10_000 })
        // This reader has to get in while the writers keep re-acquiring.
        let reader = TestThread("reader") {
            lock.readLock()
            lock.unlock()
        }
        let admitted = reader.join(until: .now + .seconds(30))
        stop.store(true, ordering: .relaxed)
        XCTAssertTrue(admitted, "a reader waited 30 s behind writers that kept re-acquiring")
        XCTAssertTrue(joinAll(writers + [reader]))
    }

    func testReaderWaitingBehindAWriterGoesBeforeTheNextWaitingWriter() {
        let lock = TKReadWriteLock()
        let order = NSLock()
        let entries = Shared<[String]>([]) // guarded by order; appended inside each critical section
        lock.writeLock()
        // 1. A second writer waits behind the first.
        let writer2 = TestThread("writer2") {
            lock.writeLock()
            order.withLock { entries.value.append("writer2") }
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { writer2.isParked }, "writer2 never blocked")
        // 2. Then a reader starts waiting, while the first writer holds and the second waits.
        let reader = TestThread("reader") {
            lock.readLock()
            order.withLock { entries.value.append("reader") }
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { reader.isParked }, "the reader never blocked")
        XCTAssertTrue(order.withLock { entries.value.isEmpty }, "a waiter got in while the first writer held the lock")
        // 3. The first writer leaves: the phase changes to the waiting reader, then writer2.
        lock.unlock()
        XCTAssertTrue(joinAll([writer2, reader]))
        XCTAssertEqual(
            order.withLock { entries.value }, ["reader", "writer2"],
            "the reader that waited behind a writer must go before the next waiting writer")
    }

    // MARK: Stress

    func testBargingWriterNeverSharesTheLockWithAHandedOffWriter() {
        // The last reader out hands the lock to a waiting writer; a writer arriving at that moment
        // through tryWriteLock must not be let in as well.
        let lock = TKReadWriteLock()
        let readersIn = Atomic<Int>(0)
        let writersIn = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        let rounds = stress(500_000)
        let write = { @Sendable in
            if writersIn.wrappingAdd(1, ordering: .relaxed).newValue != 1 { violations.wrappingAdd(1, ordering: .relaxed) }
            if readersIn.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
            writersIn.wrappingSubtract(1, ordering: .relaxed)
        }
        let threads = TestThread.spawn(4, "barge") { role in
            for _ in 0..<rounds {
                switch role {
                case 0, 1: // readers: the last one out hands off to the waiting writer
                    lock.readLock()
                    readersIn.wrappingAdd(1, ordering: .relaxed)
                    if writersIn.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
                    readersIn.wrappingSubtract(1, ordering: .relaxed)
                    lock.unlock()
                case 2: // a writer that waits, and so is handed the lock
                    lock.writeLock()
                    write()
                    lock.unlock()
                default: // a writer that only ever tries
                    if lock.tryWriteLock() {
                        write()
                        lock.unlock()
                    }
                }
            }
        }
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)))
        XCTAssertEqual(violations.load(ordering: .relaxed), 0, "two writers, or a writer and a reader, held the lock at once")
    }

    func testMixedReadsAndWritesKeepExactCounts() {
        let lock = TKReadWriteLock()
        // Writers bump both fields; readers check they are equal (no torn view of a write).
        let data = Shared((a: 0, b: 0)) // guarded by lock
        let torn = Atomic<Int>(0)
        let readsDone = Atomic<Int>(0)
        let threads = 4
        let perThread = stress(1_000_000) / threads
        let writesPerThread = (0..<perThread).filter { $0 % 8 == 0 }.count
        let workers = TestThread.spawn(threads, "mixed") { _ in
            for i in 0..<perThread {
                if i % 8 == 0 {
                    lock.writeLock()
                    data.value.a += 1
                    data.value.b += 1
                    lock.unlock()
                } else {
                    lock.readLock()
                    if data.value.a != data.value.b { torn.wrappingAdd(1, ordering: .relaxed) }
                    lock.unlock()
                    readsDone.wrappingAdd(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(300)))
        XCTAssertEqual(data.value.a, writesPerThread * threads, "writes were lost")
        XCTAssertEqual(data.value.b, writesPerThread * threads, "writes were lost")
        XCTAssertEqual(readsDone.load(ordering: .relaxed), (perThread - writesPerThread) * threads)
        XCTAssertEqual(torn.load(ordering: .relaxed), 0, "a reader saw a write half done")
    }
}

/// Holds `lock` (read or write) on its own thread until `release()`.
private final class Holder: Sendable {
    private let releaseFlag = Flag()
    private let thread: TestThread

    init(_ lock: TKReadWriteLock, write: Bool) {
        let held = Flag()
        let releaseFlag = releaseFlag
        thread = TestThread("holder") {
            if write { lock.writeLock() } else { lock.readLock() }
            held.set()
            _ = releaseFlag.wait(until: .now + .seconds(60))
            lock.unlock()
        }
        XCTAssertTrue(held.wait(), "the holder never got the lock")
    }

    func release() {
        releaseFlag.set()
        XCTAssertTrue(thread.join(), "the holder did not finish")
    }
}
