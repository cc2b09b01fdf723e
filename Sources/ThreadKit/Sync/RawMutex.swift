// RawMutex: the futex mutex state machine under TKLock, TKRecursiveLock, TKCondition and
// TKConditionLock. It knows nothing of names or recursion; the public types add those and turn
// the results into misuse messages. The word is touched by any thread; the owner field inside it
// changes only by the owning thread's unlock or by an acquiring CAS.
import Synchronization

// safety: an atomic word, owned by this ~Copyable value and freed with it.
/// A mutex whose futex word records the owner:
///
/// | word                 | meaning                                               |
/// |----------------------|-------------------------------------------------------|
/// | 0                    | unlocked                                              |
/// | tid                  | held by kernel thread `tid`, nobody parked            |
/// | tid \| parkedBit     | held by `tid`; one or more threads may be parked      |
///
/// Thread ids fit in 22 bits, so the top bit is free. Keeping the owner in the word makes the
/// ownership check of `unlock` free (it is the CAS itself) and lets a thread that locks twice be
/// told so instead of sleeping forever. Unlocking stores 0 and, if the parked bit was set, wakes one
/// thread; a thread that parked acquires with the parked bit set again, since others may still
/// sleep (Drepper, "Futexes Are Tricky", mutex 3).
///
/// The owner in the word is also what `assertHeld` checks in debug builds: the acquiring CAS
/// stores the caller's id and the release clears it, so no separate debug owner is needed and
/// release builds carry nothing for the check.
@usableFromInline
struct RawMutex: ~Copyable, @unchecked Sendable {
    static let parkedBit: UInt32 = 0x8000_0000
    @usableFromInline static let ownerMask: UInt32 = 0x7FFF_FFFF

    enum SlowResult { case acquired, timedOut, heldByCaller }

    @usableFromInline let word = FutexWord(0)

    init() {}

    /// Acquire ordering pairs with the release of the previous owner's unlock.
    @inlinable @inline(__always)
    func tryLockFast(_ tid: UInt32) -> Bool {
        word.pointer.pointee.compareExchange(
            expected: 0, desired: tid, successOrdering: .acquiring,
            failureOrdering: .relaxed
        ).exchanged
    }

    /// The owner's thread id, 0 when unlocked. Relaxed: only compared against the caller's own id,
    /// which no other thread can store.
    @inlinable @inline(__always)
    func owner() -> UInt32 { word.pointer.pointee.load(ordering: .relaxed) & RawMutex.ownerMask }

    /// Spins briefly, then parks until the mutex is acquired or the deadline passes. `isInternal`: a
    /// ThreadKit-internal lock (`lockInternal`), whose waits the blocking checker does not report.
    func lockSlow(_ tid: UInt32, deadline: ContinuousClock.Instant?, isInternal: Bool = false) -> SlowResult {
        let atomic = word.pointer
        var spin = SpinWait.forLock()
        // Phase 1: poll without announcing ourselves, while nobody is parked.
        while true {
            let state = atomic.pointee.load(ordering: .relaxed)
            if state == 0 {
                if tryLockFast(tid) { return .acquired }
                continue
            }
            if state & RawMutex.ownerMask == tid { return .heldByCaller }
            if state & RawMutex.parkedBit != 0 || !spin.spin() { break }
        }
        // Phase 2: set the parked bit and sleep until the word changes.
        while true {
            let state = atomic.pointee.load(ordering: .relaxed)
            if state == 0 {
                if atomic.pointee.compareExchange(
                    expected: 0, desired: tid | RawMutex.parkedBit,
                    successOrdering: .acquiring, failureOrdering: .relaxed
                ).exchanged {
                    return .acquired
                }
                continue
            }
            if state & RawMutex.ownerMask == tid { return .heldByCaller }
            let parked = state | RawMutex.parkedBit
            if state != parked {
                guard
                    atomic.pointee.compareExchange(
                        expected: state, desired: parked,
                        ordering: .relaxed
                    ).exchanged
                else { continue }
            }
            if !Parking.park(word, expected: parked, deadline: deadline, diagnosed: !isInternal) { return .timedOut }
        }
    }

    /// Releases the mutex if the caller holds it; false (and no change) otherwise.
    /// Release ordering publishes the critical section to the next acquirer.
    @inlinable @inline(__always)
    func unlock(_ tid: UInt32) -> Bool {
        tryUnlockFast(tid) || unlockSlow(tid)
    }

    /// The uncontended release: the word goes from `tid` straight to 0.
    @inlinable @inline(__always)
    func tryUnlockFast(_ tid: UInt32) -> Bool {
        word.pointer.pointee.compareExchange(
            expected: tid, desired: 0, successOrdering: .releasing,
            failureOrdering: .relaxed
        ).exchanged
    }

    /// The release with the parked bit set (wake one), or by a thread that does not hold it (false).
    @usableFromInline
    func unlockSlow(_ tid: UInt32) -> Bool {
        let state = word.pointer.pointee.load(ordering: .relaxed)
        guard state & RawMutex.ownerMask == tid else { return false }
        // Only the owner changes the word while it is held (others only add the parked bit, which
        // is already set), so a plain store suffices.
        word.pointer.pointee.store(0, ordering: .releasing)
        Parking.unparkOne(word)
        return true
    }

    /// Locks for ThreadKit's internal use (table and bookkeeping locks, which are leaves: nothing
    /// locks them twice). Returns the caller's thread id for the matching `unlockInternal`.
    @discardableResult
    func lockInternal() -> UInt32 {
        let tid = SystemCall.currentThreadID
        if !tryLockFast(tid) { _ = lockSlow(tid, deadline: nil, isInternal: true) }
        return tid
    }

    func unlockInternal(_ tid: UInt32) {
        _ = unlock(tid)
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        let tid = lockInternal()
        defer { unlockInternal(tid) }
        return try body()
    }

    /// Debug builds: stops the process unless the calling thread holds the mutex (`lock` names it
    /// in the message; `function` is the `…Locked` function that needs it). Release builds: nothing.
    /// A relaxed load suffices: only this thread stores its own id in the word, so it reads its own
    /// id exactly when it holds the mutex.
    @inline(__always)
    func assertHeld(
        _ lock: StaticString, function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line
    ) {
        #if DEBUG
            if owner() != SystemCall.currentThreadID {
                lockNotHeld(lock, by: function, holder: ownerDescription(), file: file, line: line)
            }
        #endif
    }

    /// Describes the holder for misuse messages.
    func ownerDescription() -> String {
        let owner = owner()
        return owner == 0 ? "nobody holds it" : "it is held by thread \(owner)"
    }
}
