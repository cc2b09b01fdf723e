// Every misuse diagnostic of the synchronization layer, each in a child process: the process must
// stop (killed by the trap of fatalError) and standard error must name the object and the fix.
import XCTest

final class MisuseTests: XCTestCase {
    func testUnlockingATKLockHeldByAnotherThreadStopsTheProcess() throws {
        try assertMisuse("lock-unlock-foreign", mentions: ["TKLock \"store\"", "unlock()", "it is held by thread", "Fix:"])
    }

    func testUnlockingAnUnlockedTKLockStopsTheProcess() throws {
        try assertMisuse("lock-unlock-unlocked", mentions: ["TKLock \"store\"", "nobody holds it", "Fix:"])
    }

    func testLockingATKLockTwiceOnOneThreadStopsTheProcess() throws {
        try assertMisuse("lock-twice", mentions: ["TKLock \"store\"", "already holds it", "TKRecursiveLock"])
    }

    func testUnlockingARecursiveLockNotHeldStopsTheProcess() throws {
        try assertMisuse("recursive-unlock-foreign", mentions: ["TKRecursiveLock \"tree\"", "Fix:"])
    }

    func testWaitingOnAConditionWithoutItsLockStopsTheProcess() throws {
        try assertMisuse("condition-wait-unlocked", mentions: ["TKCondition \"queue\"", "wait()", "lock() first"])
    }

    func testUnlockingAConditionLockNotHeldStopsTheProcess() throws {
        try assertMisuse("conditionlock-unlock-foreign", mentions: ["TKConditionLock \"mailbox\"", "unlock(withCondition: 1)"])
    }

    func testUnlockingAnUnheldReadWriteLockStopsTheProcess() throws {
        try assertMisuse("rwlock-unlock-unlocked", mentions: ["TKReadWriteLock", "nobody holds it"])
    }

    func testUnlockingAnUnheldSpinLockStopsTheProcess() throws {
        try assertMisuse("spinlock-unlock-unlocked", mentions: ["TKSpinLock", "not locked"])
    }

    func testReenteringAOnceStopsTheProcess() throws {
        try assertMisuse("once-reentrant", mentions: ["TKOnce.run", "deadlock"])
    }

    func testAnOutOfRangeAtomicBitStopsTheProcess() throws {
        try assertMisuse("atomic-bad-bit", mentions: ["testAndSet(bit: 32)", "0..<32"])
    }
}
