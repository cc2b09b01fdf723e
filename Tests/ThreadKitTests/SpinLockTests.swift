// TKSpinLock: mutual exclusion with exact counts, tryLock, and a waiter behind a long holder parks
// instead of burning its core.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class SpinLockTests: XCTestCase {
    func testSpinLockExcludesAcrossThreadCounts() {
        assertMutualExclusion { TKSpinLock() }
    }

    func testTryLockSucceedsOnlyWhenFree() {
        let lock = TKSpinLock()
        XCTAssertTrue(lock.tryLock(), "a free lock must be taken")
        XCTAssertFalse(lock.tryLock(), "a held spin lock is not recursive")
        let fromOther = Atomic<Int>(-1)
        let other = TestThread("other") { fromOther.store(lock.tryLock() ? 1 : 0, ordering: .relaxed) }
        XCTAssertTrue(other.join())
        XCTAssertEqual(fromOther.load(ordering: .relaxed), 0, "tryLock from another thread succeeded on a held lock")
        lock.unlock()
        XCTAssertTrue(lock.tryLock(), "an unlocked lock must be taken again")
        lock.unlock()
    }

    func testWaiterBehindALongHolderParksInsteadOfSpinning() {
        let lock = TKSpinLock()
        lock.lock()
        let waiting = Flag()
        let measured = Shared((cpu: Duration.zero, wall: Duration.zero)) // written by the waiter before join
        let waiter = TestThread("waiter") {
            let wallStart = ContinuousClock.now
            let cpuStart = threadCPUTime()
            waiting.set()
            lock.lock()
            measured.value = (cpu: threadCPUTime() - cpuStart, wall: ContinuousClock.now - wallStart)
            lock.unlock()
        }
        XCTAssertTrue(waiting.wait())
        usleep(300_000) // the hold under test: the waiter's lock() spans at least these 300 ms
        lock.unlock()
        XCTAssertTrue(waiter.join())
        let (cpu, wall) = measured.value
        XCTAssertGreaterThanOrEqual(wall, .milliseconds(300), "the waiter got the lock while it was held")
        XCTAssertLessThan(cpu, wall / 2, "the waiter burned \(cpu) of CPU during a \(wall) wait: it must park, not spin")
    }
}

/// CPU time consumed so far by the calling thread.
private func threadCPUTime() -> Duration {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
}
