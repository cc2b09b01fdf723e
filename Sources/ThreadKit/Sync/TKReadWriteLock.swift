// TKReadWriteLock: many readers or one writer, phase-fair so neither side starves.
// Thread-safe. Uncontended read and write locking are one CAS on `state`; everything that has to
// wait goes through the slow path under `queue`, a RawMutex that guards the waiter bookkeeping.
//
// Fairness, as SPEC §8 asks: a waiting writer blocks new readers (they queue behind it), and when
// a writer unlocks, every reader waiting at that moment is admitted before the next writer. So
// readers and writers alternate in phases under contention.
//
// Lock order: `queue` is a leaf; nothing is locked while holding it, and threads are woken only
// after it is released.
import Synchronization

// safety: the state words are atomic; the waiting counts are touched only under `queue`.
/// A reader-writer lock (pthread_rwlock with fairness). `unlock()` releases whichever side the
/// caller holds.
public final class TKReadWriteLock: @unchecked Sendable {
    /// The state word, changed by CAS/fetch-ops from any thread:
    ///
    /// | bits   | name            | meaning                                                   |
    /// |--------|-----------------|-----------------------------------------------------------|
    /// | 0...27 | readers         | read holders, including readers admitted by a hand-off     |
    /// | 28     | writer          | held for writing                                          |
    /// | 29     | writersWaiting  | a writer waits: new readers must queue (set under `queue`) |
    /// | 30     | readersWaiting  | readers wait: the writer's unlock must admit them          |
    ///
    /// The two waiting bits are set and cleared only with `queue` held; the reader count and the
    /// writer bit also change on the lock-free fast paths.
    private static let readerMask: UInt32 = 0x0FFF_FFFF
    private static let writer: UInt32 = 1 << 28
    private static let writersWaiting: UInt32 = 1 << 29
    private static let readersWaiting: UInt32 = 1 << 30

    private let state = Atomic<UInt32>(0)
    /// The thread id of the write holder, 0 when none. Written by the writer after acquiring and
    /// before releasing; compared against the caller's own id in `unlock`, so relaxed suffices.
    private let writerThread = Atomic<UInt32>(0)

    private let queue = RawMutex()
    /// The lock's identity for the diagnostics (it has no public name).
    private let label = LockName()
    /// Bumped (under `queue`) each time the waiting readers are admitted; readers park on it.
    private let readerGeneration = FutexWord(0)
    /// Bumped (under `queue`) each time a writer is handed the lock; writers park on it.
    private let writerGeneration = FutexWord(0)
    private var waitingReaders = 0 // guarded by `queue`
    private var waitingWriters = 0 // guarded by `queue`
    private var writerGrants = 0 // guarded by `queue`: hand-offs not yet claimed by a writer

    /// Creates an unlocked reader-writer lock.
    public init() {}

    /// Runs `body` holding the lock for reading; released however `body` exits.
    public func withReadLock<T>(_ body: () throws -> T) rethrows -> T {
        readLock()
        defer { unlock() }
        return try body()
    }

    /// Runs `body` holding the lock for writing; released however `body` exits.
    public func withWriteLock<T>(_ body: () throws -> T) rethrows -> T {
        writeLock()
        defer { unlock() }
        return try body()
    }

    // MARK: Readers

    /// Takes the lock for reading, with other readers, like `pthread_rwlock_rdlock`. Blocks while
    /// a writer holds it or waits for it (so writers are not starved). Not recursive: reading again
    /// on a thread that already reads can deadlock behind a waiting writer.
    public func readLock() {
        // Checked before any wait: a read lock can wait (behind a writer), so it orders too.
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKReadWriteLock") }
        // Optimistic: one fetch-add, as pthread_rwlock does, instead of a load + CAS that fails
        // whenever another reader moves the count. If a writer holds or waits, the increment is
        // undone as a read unlock (which hands the lock on if it was the last) and we queue.
        let s = state.wrappingAdd(1, ordering: .acquiring).oldValue
        if s & (Self.writer | Self.writersWaiting) == 0 { return }
        readUnlock()
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: "TKReadWriteLock (read)") }
        let start = Contention.start()
        let waiting = WaitGraph.begin(self, .lock, "TKReadWriteLock.readLock()") // who waits for whom (§6)
        readLockSlow()
        WaitGraph.end(waiting)
        Contention.lockWaited(label, kind: "TKReadWriteLock", since: start)
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.end, self, name: "TKReadWriteLock (read)") }
    }

    /// Takes the lock for reading if no writer holds it or waits for it; never blocks.
    public func tryReadLock() -> Bool {
        guard tryReadLockNow() else { return false }
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKReadWriteLock", isTry: true) }
        return true
    }

    /// Acquiring on success pairs with the releasing unlock of the previous writer.
    private func tryReadLockNow() -> Bool {
        var s = state.load(ordering: .relaxed)
        while s & (Self.writer | Self.writersWaiting) == 0 {
            let (exchanged, now) = state.compareExchange(
                expected: s, desired: s + 1,
                successOrdering: .acquiring, failureOrdering: .relaxed)
            if exchanged { return true }
            s = now
        }
        return false
    }

    private func readLockSlow() {
        let tid = lockQueue()
        while true {
            if tryReadLockNow() { return unlockQueue(tid) }
            // Announce ourselves; the fetch-or is ordered with the writer's unlock on the same word,
            // so either the writer sees readersWaiting or we see it gone.
            waitingReaders += 1
            let s = state.bitwiseOr(Self.readersWaiting, ordering: .relaxed).newValue
            if s & (Self.writer | Self.writersWaiting) == 0 {
                waitingReaders -= 1
                if waitingReaders == 0 { state.bitwiseAnd(~Self.readersWaiting, ordering: .relaxed) }
                continue
            }
            let generation = readerGeneration.pointer.pointee.load(ordering: .relaxed)
            unlockQueue(tid)
            // Admitted when the generation moves: the admitting writer has already counted us.
            waitForChange(readerGeneration, from: generation)
            return
        }
    }

    // MARK: Writers

    /// Takes the lock for writing, alone, like `pthread_rwlock_wrlock`. Blocks until every reader
    /// and writer has left; readers waiting when a writer unlocks go first. Not recursive.
    public func writeLock() {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKReadWriteLock") }
        if tryWriteLockNow() { return }
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.begin, self, name: "TKReadWriteLock (write)") }
        let start = Contention.start()
        let waiting = WaitGraph.begin(self, .lock, "TKReadWriteLock.writeLock()") // who waits for whom (§6)
        writeLockSlow()
        WaitGraph.end(waiting)
        Contention.lockWaited(label, kind: "TKReadWriteLock", since: start)
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.lockWait(.end, self, name: "TKReadWriteLock (write)") }
    }

    /// Takes the lock for writing if nobody holds it; never blocks.
    public func tryWriteLock() -> Bool {
        guard tryWriteLockNow() else { return false }
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.acquire(label, kind: "TKReadWriteLock", isTry: true) }
        return true
    }

    private func tryWriteLockNow() -> Bool {
        var s = state.load(ordering: .relaxed)
        while s & (Self.readerMask | Self.writer) == 0 {
            let (exchanged, now) = state.compareExchange(
                expected: s, desired: s | Self.writer,
                successOrdering: .acquiring, failureOrdering: .relaxed)
            if exchanged {
                writerThread.store(SystemCall.currentThreadID, ordering: .relaxed)
                return true
            }
            s = now
        }
        return false
    }

    private func writeLockSlow() {
        let tid = lockQueue()
        while true {
            if tryWriteLockNow() { return unlockQueue(tid) }
            waitingWriters += 1
            let s = state.bitwiseOr(Self.writersWaiting, ordering: .relaxed).newValue
            if s & (Self.readerMask | Self.writer) == 0 {
                // Freed between our try and the announcement: undo it and try again.
                waitingWriters -= 1
                if waitingWriters == 0 { state.bitwiseAnd(~Self.writersWaiting, ordering: .relaxed) }
                continue
            }
            break
        }
        // Wait for a hand-off; another waiting writer may claim one first, so count them.
        while true {
            let generation = writerGeneration.pointer.pointee.load(ordering: .relaxed)
            unlockQueue(tid)
            waitForChange(writerGeneration, from: generation)
            _ = lockQueue()
            if writerGrants > 0 {
                writerGrants -= 1
                writerThread.store(tid, ordering: .relaxed)
                return unlockQueue(tid)
            }
        }
    }

    // MARK: Unlock

    /// Releases the side the caller holds (one read hold, or the write hold). Unlocking a lock held
    /// for writing by another thread, or one nobody holds, stops the process with a message.
    public func unlock() {
        if DiagnosticsSwitch.isOn(.lockOrder) { LockOrder.release(label) }
        let tid = SystemCall.currentThreadID
        let s = state.load(ordering: .relaxed)
        if s & Self.writer != 0 {
            guard writerThread.load(ordering: .relaxed) == tid else {
                misuse(
                    "TKReadWriteLock \(ObjectIdentifier(self)).unlock() called on thread \(tid), but it is held for "
                        + "writing by thread \(writerThread.load(ordering: .relaxed)). Fix: unlock on the thread that locked it.")
            }
            writeUnlock(tid)
        } else if s & Self.readerMask != 0 {
            readUnlock()
        } else {
            misuse(
                "TKReadWriteLock \(ObjectIdentifier(self)).unlock() called on thread \(tid), but nobody holds it. "
                    + "Fix: balance every readLock()/writeLock() with one unlock().")
        }
    }

    private func readUnlock() {
        // Releasing: publishes this reader's critical section to the writer that follows.
        let s = state.wrappingSubtract(1, ordering: .releasing).newValue
        guard s & Self.readerMask == 0, s & Self.writersWaiting != 0 else { return }
        // Last reader out with a writer waiting: hand it the lock.
        let tid = lockQueue()
        let wake = waitingWriters > 0 && grantWriter(handoff: false)
        unlockQueue(tid)
        if wake { Parking.unparkOne(writerGeneration) }
    }

    private func writeUnlock(_ tid: UInt32) {
        writerThread.store(0, ordering: .relaxed)
        if state.compareExchange(expected: Self.writer, desired: 0, ordering: .releasing).exchanged { return }
        let queueTid = lockQueue()
        var wakeReaders = false
        var wakeWriter = false
        if waitingReaders > 0 {
            // Phase change: every reader waiting now goes before the next writer.
            let admitted = UInt32(waitingReaders)
            waitingReaders = 0
            update { ($0 & ~(Self.writer | Self.readersWaiting)) + admitted }
            readerGeneration.pointer.pointee.wrappingAdd(1, ordering: .releasing)
            wakeReaders = true
        } else if waitingWriters > 0 {
            wakeWriter = grantWriter(handoff: true)
        } else {
            update { $0 & ~Self.writer }
        }
        unlockQueue(queueTid)
        if wakeReaders { Parking.unparkAll(readerGeneration) }
        if wakeWriter { Parking.unparkOne(writerGeneration) }
    }

    /// Hands the lock to one waiting writer, with `queue` held; the woken writer claims the grant.
    /// With `handoff` the caller is the writer releasing the lock, and its writer bit passes on as
    /// it is. Otherwise (the last reader left) the bit is claimed only while the lock is still free:
    /// a `tryWriteLock` may have barged in meanwhile, and then that writer's unlock, which finds
    /// writersWaiting set, hands the lock on instead. Returns whether a writer must be woken.
    private func grantWriter(handoff: Bool) -> Bool {
        let stillWaiting = waitingWriters > 1
        var s = state.load(ordering: .relaxed)
        while true {
            if !handoff && s & (Self.readerMask | Self.writer) != 0 { return false }
            var next = s | Self.writer
            if !stillWaiting { next &= ~Self.writersWaiting }
            let (exchanged, now) = state.compareExchange(expected: s, desired: next, ordering: .acquiringAndReleasing)
            if exchanged { break }
            s = now
        }
        waitingWriters -= 1
        writerGrants += 1
        writerGeneration.pointer.pointee.wrappingAdd(1, ordering: .releasing)
        return true
    }

    /// Applies `transform` to the state word atomically. Releasing: the hand-off it performs
    /// publishes the previous holder's writes to the threads it admits, which acquire via the
    /// generation word they wait on.
    private func update(_ transform: (UInt32) -> UInt32) {
        var s = state.load(ordering: .relaxed)
        while true {
            let (exchanged, now) = state.compareExchange(expected: s, desired: transform(s), ordering: .acquiringAndReleasing)
            if exchanged { return }
            s = now
        }
    }

    // MARK: Waiting

    private func waitForChange(_ word: borrowing FutexWord, from value: UInt32) {
        var spin = SpinWait(limit: SpinWait.conditionLimit)
        // Acquiring: pairs with the releasing bump by the thread that admitted us.
        while word.pointer.pointee.load(ordering: .acquiring) == value {
            if !spin.spin() { _ = Parking.park(word, expected: value) }
        }
    }

    private func lockQueue() -> UInt32 { queue.lockInternal() }
    private func unlockQueue(_ tid: UInt32) { queue.unlockInternal(tid) }
}

extension TKReadWriteLock: WaitTarget {
    var waitDescription: String { "TKReadWriteLock \(ObjectIdentifier(self))" }
    /// The writer if one holds it; readers are only counted, so they are not named.
    var waitHolder: WaitHolder {
        let writer = writerThread.load(ordering: .relaxed)
        if writer != 0 { return .thread(writer) }
        let readers = state.load(ordering: .relaxed) & Self.readerMask
        return readers == 0 ? .none("which nobody holds now") : .none("held by \(readers) reader\(readers == 1 ? "" : "s")")
    }
}
