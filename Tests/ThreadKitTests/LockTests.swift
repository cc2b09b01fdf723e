// TKLock and TKRecursiveLock: exclusion, tryLock, deadlines, names, recursion.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class LockTests: XCTestCase {
    // MARK: TKLock

    func testEveryTKLockingLockExcludesAcrossThreadCounts() {
        assertMutualExclusion { TKLock() }
        assertMutualExclusion { TKRecursiveLock() }
        assertMutualExclusion { TKCondition() }
        assertMutualExclusion { TKConditionLock(condition: 0) }
    }

    func testTryLockFailsWhileAnotherThreadHoldsIt() {
        let lock = TKLock()
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = Workers.start {
            lock.lock()
            held.signal()
            release.wait()
            lock.unlock()
        }
        held.wait()
        XCTAssertFalse(lock.tryLock())
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(lock.tryLock())
        lock.unlock()
    }

    func testTryLockMillionTimesUncontended() {
        let lock = TKLock()
        var taken = 0
        for _ in 0..<stress(1_000_000) where lock.tryLock() {
            taken += 1
            lock.unlock()
        }
        XCTAssertEqual(taken, stress(1_000_000))
    }

    func testLockBeforeDeadlineNeverReturnsEarly() {
        let lock = TKLock()
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = Workers.start {
            lock.lock()
            held.signal()
            release.wait()
            lock.unlock()
        }
        held.wait()
        for ms in [1, 20, 100] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            XCTAssertFalse(lock.lock(before: deadline))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline, "lock(before:) returned before its deadline")
        }
        XCTAssertFalse(lock.lock(before: .now - .seconds(1)), "a past deadline on a held lock must fail at once")
        release.signal()
        XCTAssertTrue(lock.lock(before: .now + .seconds(30)), "the lock was released but lock(before:) failed")
        lock.unlock()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testLockBeforeSucceedsWhenReleasedInTime() {
        let lock = TKLock()
        lock.lock()
        let got = Atomic<Bool>(false)
        let waiter = Workers.start {
            got.store(lock.lock(before: .now + .seconds(30)), ordering: .relaxed)
            lock.unlock()
        }
        lock.unlock()
        XCTAssertEqual(waiter.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(got.load(ordering: .relaxed))
    }

    /// The guide's NSLock example: a thread that cannot take the lock at once keeps computing and
    /// updates the shared display when tryLock succeeds; lock(before:) alike, one increment per
    /// timeout. No result is lost and the display is never touched while another thread holds it.
    func testKeepComputingUntilTheLockIsFree() {
        let lock = TKLock()
        let display = Guarded(0)
        let holderInside = Atomic<Bool>(false)
        let touchedWhileHeld = Atomic<Int>(0)
        let busy = Atomic<Int>(0)
        let increments = 2_000
        lock.lock()
        holderInside.store(true, ordering: .relaxed)
        let worker = Workers.start {
            var pending = 0
            for n in 1...increments {
                pending += n
                if lock.tryLock() {
                    if holderInside.load(ordering: .relaxed) { touchedWhileHeld.wrappingAdd(1, ordering: .relaxed) }
                    display.withLock { $0 += pending }
                    pending = 0
                    lock.unlock()
                } else {
                    busy.wrappingAdd(1, ordering: .relaxed)
                }
            }
            lock.lock()
            display.withLock { $0 += pending }
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { busy.load(ordering: .relaxed) >= 5 }, "the worker blocked instead of computing")
        holderInside.store(false, ordering: .relaxed)
        lock.unlock()
        XCTAssertEqual(worker.wait(timeout: .now() + 30), .success)
        XCTAssertGreaterThanOrEqual(busy.load(ordering: .relaxed), 5)
        XCTAssertEqual(touchedWhileHeld.load(ordering: .relaxed), 0, "tryLock succeeded while another thread held the lock")
        XCTAssertEqual(display.withLock { $0 }, increments * (increments + 1) / 2, "a result never reached the display")

        lock.lock()
        holderInside.store(true, ordering: .relaxed)
        let timeouts = Atomic<Int>(0)
        let early = Atomic<Int>(0)
        let acquiredWhileHeld = Atomic<Bool>(true)
        let patient = Workers.start {
            var computed = 0
            while true {
                let deadline = ContinuousClock.now + .milliseconds(2)
                if lock.lock(before: deadline) { break }
                if ContinuousClock.now < deadline { early.wrappingAdd(1, ordering: .relaxed) }
                computed += 1
                timeouts.wrappingAdd(1, ordering: .relaxed)
            }
            acquiredWhileHeld.store(holderInside.load(ordering: .relaxed), ordering: .relaxed)
            display.withLock { $0 += computed }
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { timeouts.load(ordering: .relaxed) >= 3 })
        holderInside.store(false, ordering: .relaxed)
        lock.unlock()
        XCTAssertEqual(patient.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(early.load(ordering: .relaxed), 0, "lock(before:) gave up before its deadline")
        XCTAssertFalse(acquiredWhileHeld.load(ordering: .relaxed), "lock(before:) acquired a lock another thread held")
        XCTAssertEqual(display.withLock { $0 }, increments * (increments + 1) / 2 + timeouts.load(ordering: .relaxed))
    }

    func testNameIsKept() {
        let lock = TKLock()
        XCTAssertNil(lock.name)
        lock.name = "store"
        XCTAssertEqual(lock.name, "store")
    }

    func testWithLockReleasesWhenTheBodyThrows() {
        struct Boom: Error {}
        let lock = TKLock()
        XCTAssertThrowsError(try lock.withLock { throw Boom() })
        XCTAssertTrue(lock.tryLock(), "withLock left the lock held after a throw")
        lock.unlock()
        XCTAssertEqual(lock.withLock { 42 }, 42)
    }

    func testManyWaitersAllGetTheLock() {
        // Every waiter parks (the holder keeps the lock until all have started waiting) and each
        // must be woken exactly when its turn comes: no lost wakeups.
        let lock = TKLock()
        let acquired = JudgedCounter()
        let started = JudgedCounter()
        lock.lock()
        let waiters = (0..<8).map { _ in
            Workers.start {
                started.add()
                lock.lock()
                acquired.add()
                lock.unlock()
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { started.count == 8 }, "timed out waiting until all 8 waiters have started")
        XCTAssertEqual(acquired.count, 0)
        lock.unlock()
        for w in waiters { XCTAssertEqual(w.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(acquired.count, 8)
    }

    // MARK: TKRecursiveLock

    func testRecursiveLockNestsOnOneThread() {
        let lock = TKRecursiveLock()
        func recurse(_ n: Int) -> Int {
            lock.lock()
            defer { lock.unlock() }
            return n == 0 ? 0 : 1 + recurse(n - 1)
        }
        XCTAssertEqual(recurse(100), 100)
        XCTAssertTrue(lock.tryLock() && lock.tryLock() && lock.lock(before: .now))
        lock.unlock()
        lock.unlock()
        lock.unlock()
        let freed = Atomic<Bool>(false)
        XCTAssertEqual(
            Workers.start {
                let got = lock.tryLock()
                if got { lock.unlock() }
                freed.store(got, ordering: .relaxed)
            }.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(freed.load(ordering: .relaxed), "balanced unlocks did not release the lock")
    }

    func testRecursiveLockExcludesOtherThreadsUntilFullyReleased() {
        let lock = TKRecursiveLock()
        lock.lock()
        lock.lock()
        let otherGot = Atomic<Bool>(false)
        let probe = { () -> Bool in
            let got = Atomic<Bool>(false)
            _ = Workers.start {
                let ok = lock.tryLock()
                if ok { lock.unlock() }
                got.store(ok, ordering: .relaxed)
            }.wait(timeout: .now() + 30)
            return got.load(ordering: .relaxed)
        }
        XCTAssertFalse(probe())
        lock.unlock()
        XCTAssertFalse(probe(), "released after one of two unlocks")
        let deadline = ContinuousClock.now + .milliseconds(30)
        let timedOut = Atomic<Bool>(false)
        _ = Workers.start {
            timedOut.store(!lock.lock(before: deadline), ordering: .relaxed)
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        }.wait(timeout: .now() + 30)
        XCTAssertTrue(timedOut.load(ordering: .relaxed))
        lock.unlock()
        otherGot.store(probe(), ordering: .relaxed)
        XCTAssertTrue(otherGot.load(ordering: .relaxed))
    }

    /// Whether another thread can take `lock` now (it releases it again at once).
    private func otherThreadCanTake(_ lock: TKRecursiveLock) -> Bool {
        let got = Atomic<Bool>(false)
        XCTAssertEqual(
            Workers.start {
                let ok = lock.tryLock()
                if ok { lock.unlock() }
                got.store(ok, ordering: .relaxed)
            }.wait(timeout: .now() + 30), .success)
        return got.load(ordering: .relaxed)
    }

    /// Deep nesting through every way in (lock, tryLock, lock(before:)) counts each level: the
    /// inner unlocks (no atomic) keep it held, only the last one (the CAS) lets another thread in.
    func testRecursiveLockCountsDeepNestingExactly() {
        let lock = TKRecursiveLock()
        let levels = 10_000
        for level in 0..<levels {
            switch level % 3 {
            case 0: lock.lock()
            case 1: XCTAssertTrue(lock.tryLock())
            default: XCTAssertTrue(lock.lock(before: .now))
            }
        }
        XCTAssertFalse(otherThreadCanTake(lock))
        for _ in 0..<(levels - 1) { lock.unlock() }
        XCTAssertFalse(otherThreadCanTake(lock), "released with one level still held")
        lock.unlock()
        XCTAssertTrue(otherThreadCanTake(lock), "balanced unlocks did not release the lock")
    }

    /// The last unlock leaves the depth word as it was (the next holder sets it): a depth left by
    /// one holder must not count for the next, on another thread or the same one.
    func testRecursiveLockDepthDoesNotCarryOverToTheNextHolder() {
        let lock = TKRecursiveLock()
        XCTAssertEqual(
            Workers.start {
                for _ in 0..<5 { lock.lock() }
                for _ in 0..<5 { lock.unlock() }
            }.wait(timeout: .now() + 30), .success)
        lock.lock()
        XCTAssertFalse(otherThreadCanTake(lock))
        lock.unlock()
        XCTAssertTrue(otherThreadCanTake(lock), "one lock() after an earlier holder's depth 5 needed more than one unlock()")
        lock.lock()
        lock.lock()
        lock.lock()
        lock.unlock()
        lock.unlock()
        lock.unlock()
        XCTAssertTrue(lock.tryLock())
        XCTAssertFalse(otherThreadCanTake(lock))
        lock.unlock()
        XCTAssertTrue(otherThreadCanTake(lock))
    }

    /// Waiters parked while the holder is several levels deep: inner unlocks wake nobody, the last
    /// one (the parked bit makes its CAS fail, so it goes out of line) hands the lock on.
    func testRecursiveLockHandsOverToParkedWaitersOnlyAtTheLastUnlock() {
        let lock = TKRecursiveLock()
        let inside = Atomic<Int>(0)
        lock.lock()
        lock.lock()
        lock.lock()
        let waiters = (0..<3).map { _ in
            Workers.start {
                lock.lock()
                lock.lock()
                inside.wrappingAdd(1, ordering: .relaxed)
                lock.unlock()
                lock.unlock()
            }
        }
        Thread.sleep(forTimeInterval: 0.05) // let them park
        lock.unlock()
        lock.unlock()
        Thread.sleep(forTimeInterval: 0.05)
        XCTAssertEqual(inside.load(ordering: .relaxed), 0, "a waiter got in while the holder was still one level deep")
        lock.unlock()
        for waiter in waiters { XCTAssertEqual(waiter.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(inside.load(ordering: .relaxed), 3)
        XCTAssertTrue(otherThreadCanTake(lock))
    }

    func testRecursiveLockExcludesUnderContention() {
        let lock = TKRecursiveLock()
        let counter = Shared(0) // guarded by lock
        let perThread = stress(100_000) / 4
        Workers.run(4) { _ in
            for _ in 0..<perThread {
                lock.lock()
                lock.lock()
                counter.value += 1
                lock.unlock()
                lock.unlock()
            }
        }
        XCTAssertEqual(counter.value, perThread * 4)
    }
}
