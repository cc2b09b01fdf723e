// Every misuse diagnostic of the synchronization layer, each an exit test: the misuse runs in a
// child process of the test runner, which must stop (the trap of fatalError) with standard error
// naming the object and the fix (expectMisuse, Support/MisuseAssertions.swift).
import Foundation
import Testing
import ThreadKit

@Suite struct MisuseTests {
    @Test func unlockingATKLockHeldByAnotherThreadStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let lock = TKLock()
            lock.name = "store"
            lock.lock()
            Workers.start { lock.unlock() }.wait()
        }
        expectMisuse(result, mentions: ["TKLock \"store\"", "unlock()", "it is held by thread", "Fix:"])
    }

    @Test func unlockingAnUnlockedTKLockStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let lock = TKLock()
            lock.name = "store"
            lock.unlock()
        }
        expectMisuse(result, mentions: ["TKLock \"store\"", "nobody holds it", "Fix:"])
    }

    @Test func lockingATKLockTwiceOnOneThreadStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let lock = TKLock()
            lock.name = "store"
            lock.lock()
            lock.lock()
        }
        expectMisuse(result, mentions: ["TKLock \"store\"", "already holds it", "TKRecursiveLock"])
    }

    @Test func unlockingARecursiveLockNotHeldStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let lock = TKRecursiveLock()
            lock.name = "tree"
            lock.unlock()
        }
        expectMisuse(result, mentions: ["TKRecursiveLock \"tree\"", "Fix:"])
    }

    @Test func waitingOnAConditionWithoutItsLockStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let condition = TKCondition()
            condition.name = "queue"
            condition.wait()
        }
        expectMisuse(result, mentions: ["TKCondition \"queue\"", "wait()", "lock() first"])
    }

    @Test func unlockingAConditionLockNotHeldStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let lock = TKConditionLock(condition: 0)
            lock.name = "mailbox"
            lock.unlock(withCondition: 1)
        }
        expectMisuse(result, mentions: ["TKConditionLock \"mailbox\"", "unlock(withCondition: 1)"])
    }

    @Test func unlockingAnUnheldReadWriteLockStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKReadWriteLock().unlock()
        }
        expectMisuse(result, mentions: ["TKReadWriteLock", "nobody holds it"])
    }

    @Test func unlockingAnUnheldSpinLockStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKSpinLock().unlock()
        }
        expectMisuse(result, mentions: ["TKSpinLock", "not locked"])
    }

    @Test func reenteringAOnceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let once = TKOnce()
            once.run { once.run {} }
        }
        expectMisuse(result, mentions: ["TKOnce.run", "deadlock"])
    }

    @Test func anOutOfRangeAtomicBitStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKAtomicInt32(0).testAndSet(bit: 32)
        }
        expectMisuse(result, mentions: ["testAndSet(bit: 32)", "0..<32"])
    }
}
