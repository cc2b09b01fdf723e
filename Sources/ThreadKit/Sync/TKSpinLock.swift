// TKSpinLock: OSSpinLock's role, without its flaw. Thread-safe.
// A pure spin lock burns a core while the holder is descheduled (on our 2-core machines that is
// half the machine) and can livelock with priorities. This one spins a bounded number of times,
// then yields the CPU a few times, then parks on its word like a mutex.

import CThreadKit
import Glibc
import Synchronization

// safety: its fields are an atomic word and a name, each thread-safe.
/// A lock for very short critical sections: waiters spin first, then yield, then sleep.
public final class TKSpinLock: TKLocking, @unchecked Sendable {
    /// 0: unlocked; 1: locked; 2: locked and a waiter may be parked (it must be woken).
    private let word = FutexWord(0)
    /// The lock's identity for the diagnostics (it has no public name).
    private let label = LockName()

    /// Creates an unlocked spin lock.
    public init() {}

    /// Takes the lock if it is free now; never blocks or spins.
    public func tryLock() -> Bool {
        guard tryLockNow() else { return false }
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKSpinLock", isTry: true) }
        return true
    }

    private func tryLockNow() -> Bool {
        word.pointer.pointee.compareExchange(
            expected: 0, desired: 1, successOrdering: .acquiring,
            failureOrdering: .relaxed
        ).exchanged
    }

    /// Takes the lock: a waiter spins a bounded number of times, then yields the CPU a few times,
    /// then sleeps until woken, so a descheduled holder costs no burnt core (`OSSpinLock`'s flaw).
    /// Not recursive: locking it again on the holding thread deadlocks.
    public func lock() {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKSpinLock") }
        if tryLockNow() { return }
        let start = Contention.start()
        lockSlow()
        Contention.lockWaited(label, kind: "TKSpinLock", since: start)
    }

    /// Releases the lock, waking a sleeping waiter if any. Unlocking a lock that is not locked
    /// stops the process with a message; the holder is not recorded, so an unlock from another
    /// thread is not detected.
    public func unlock() {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
        // Releasing: publishes the critical section to the next acquirer.
        let previous = word.pointer.pointee.exchange(0, ordering: .releasing)
        if previous == 2 { Parking.unparkOne(word) }
        if previous == 0 {
            misuse(
                "TKSpinLock \(ObjectIdentifier(self)).unlock() called while it is not locked. "
                    + "Fix: balance every lock() with one unlock().")
        }
    }

    private func lockSlow() {
        var spin = SpinWait(limit: 200)
        var yields = 0
        while true {
            if word.pointer.pointee.load(ordering: .relaxed) == 0, tryLockNow() { return }
            if spin.spin() { continue }
            if yields < 4 {
                yields += 1
                sched_yield()
                continue
            }
            break
        }
        // Parked acquisitions keep the "waiter" mark: others may still be asleep.
        while word.pointer.pointee.exchange(2, ordering: .acquiring) != 0 {
            _ = Parking.park(word, expected: 2)
        }
    }
}
