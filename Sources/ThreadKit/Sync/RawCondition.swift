// RawCondition: a futex condition variable used with a RawMutex (under TKCondition and
// TKConditionLock). Any thread may signal; waiters must hold the mutex they pass in.
import Synchronization

// safety: two atomic words, owned by this ~Copyable value and freed with it.
/// A sequence counter that signal and broadcast bump, plus a count of parked waiters so a signal
/// with nobody asleep costs one atomic add and no syscall.
///
/// `sequence` is the futex word: a waiter reads it while holding the mutex, unlocks, spins briefly
/// watching for a change, then parks expecting the value it read. A signal that lands between the
/// read and the park changes the word, so the kernel refuses to sleep (EAGAIN): no lost wakeups.
///
/// `parked` pairs with `sequence` like Dekker's flags: the waiter increments `parked` and then the
/// kernel reads `sequence`; the signaller bumps `sequence` and then reads `parked`. Both are
/// sequentially consistent, so at least one side sees the other.
struct RawCondition: ~Copyable, @unchecked Sendable {
    let sequence = FutexWord(0)
    let parked = FutexWord(0)

    /// Releases `mutex` (held by `tid`), waits for a signal or the deadline, and re-acquires it.
    /// Returns false only when the deadline has passed. May return true spuriously.
    func wait(_ mutex: borrowing RawMutex, _ tid: UInt32, deadline: ContinuousClock.Instant?) -> Bool {
        let seen = sequence.pointer.pointee.load(ordering: .relaxed)
        let released = mutex.unlock(tid)
        assert(released, "callers check ownership before waiting")
        var signalled = true
        var spin = SpinWait(limit: SpinWait.conditionLimit)
        // Acquiring: pairs with the releasing bump in `signal`, though the mutex re-acquired below
        // is what actually orders the protected data.
        while sequence.pointer.pointee.load(ordering: .acquiring) == seen {
            if spin.spin() { continue }
            parked.pointer.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            signalled = Parking.park(sequence, expected: seen, deadline: deadline)
            parked.pointer.pointee.wrappingSubtract(1, ordering: .relaxed)
            break
        }
        if !mutex.tryLockFast(tid) {
            _ = mutex.lockSlow(tid, deadline: nil)
        }
        return signalled
    }

    func signal() { bump(all: false) }
    func broadcast() { bump(all: true) }

    private func bump(all: Bool) {
        sequence.pointer.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if parked.pointer.pointee.load(ordering: .sequentiallyConsistent) != 0 {
            if all { Parking.unparkAll(sequence) } else { Parking.unparkOne(sequence) }
        }
    }
}
