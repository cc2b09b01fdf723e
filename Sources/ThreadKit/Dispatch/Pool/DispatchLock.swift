// DispatchLock: the internal leaf lock of the dispatch layer (pool, queues, groups, sources, the
// manager). Any thread. Held only for a few loads and stores; nothing else is locked while one is
// held and no callback runs under it.
//
// Unlike RawMutex it sleeps with `SystemCall.futexWait` directly, not through `Parking.park`: a
// pool worker that briefly waits for the pool's own lock must not be reported to the pool as
// blocked (the pool's observer takes this very lock, and would start a worker for nothing).
import Synchronization

/// Drepper's "mutex 2" ("Futexes Are Tricky"):
///
/// | word | meaning                                  |
/// |------|------------------------------------------|
/// | 0    | unlocked                                 |
/// | 1    | locked, nobody sleeping                  |
/// | 2    | locked, one or more threads may sleep    |
///
/// The word does not say who holds the lock, so debug builds keep the holder's thread id beside it
/// (`holder`, stored after acquiring and cleared before releasing) for `assertHeld`. Release
/// builds have no such field: their lock and unlock are the bare exchanges.
// safety: the word is atomic, owned by this ~Copyable value and freed with it.
struct DispatchLock: ~Copyable, @unchecked Sendable {
    private let word: FutexWord
    #if DEBUG
        /// The holder's thread id, 0 when free. Written only by the holder, so a relaxed load by a
        /// thread reads its own id exactly when that thread holds the lock.
        private let holder = FutexWord(0)
    #endif

    init() { word = FutexWord(0) }

    private init(word: consuming FutexWord) { self.word = word }

    /// A lock whose word sits alone on its cache line (`FutexWord.onItsOwnCacheLine`).
    static func onItsOwnCacheLine() -> DispatchLock { DispatchLock(word: .onItsOwnCacheLine()) }

    /// Acquiring on success: pairs with the releasing exchange in `unlock`.
    @inline(__always)
    func lock() {
        if word.pointer.pointee.compareExchange(
            expected: 0, desired: 1, successOrdering: .acquiring,
            failureOrdering: .relaxed
        ).exchanged {
            #if DEBUG
                noteAcquired()
            #endif
            return
        }
        lockSlow()
    }

    /// Releasing: publishes the critical section to the next acquirer.
    @inline(__always)
    func unlock() {
        #if DEBUG
            noteReleasing()
        #endif
        if word.pointer.pointee.exchange(0, ordering: .releasing) == 2 {
            SystemCall.futexWake(word.address, count: 1)
        }
    }

    /// Takes the lock if it is free, without waiting. Sequentially consistent, success or not, so
    /// that it orders against a store made just before it (the pool's staging handshake: a
    /// producer that staged work and raised a flag either takes the lock here, or the holder sees
    /// the flag after `unlockSequentiallyConsistent`; docs/DispatchPool.md, "Staging").
    @inline(__always)
    func tryLock() -> Bool {
        let taken = word.pointer.pointee.compareExchange(
            expected: 0, desired: 1, successOrdering: .sequentiallyConsistent,
            failureOrdering: .sequentiallyConsistent
        ).exchanged
        #if DEBUG
            if taken { noteAcquired() }
        #endif
        return taken
    }

    /// Whether threads sleep on the lock now (its word is 2): waiting for it would mean parking
    /// behind them. A relaxed load; a hint.
    @inline(__always)
    var isCongested: Bool { word.pointer.pointee.load(ordering: .relaxed) == 2 }

    /// Whether some thread holds the lock now. A relaxed load; a hint.
    @inline(__always)
    var isLocked: Bool { word.pointer.pointee.load(ordering: .relaxed) != 0 }

    /// `unlock`, sequentially consistent: a load after it cannot be ordered before it (the other
    /// half of the handshake above). The same instruction as `unlock` on x86.
    @inline(__always)
    func unlockSequentiallyConsistent() {
        #if DEBUG
            noteReleasing()
        #endif
        if word.pointer.pointee.exchange(0, ordering: .sequentiallyConsistent) == 2 {
            SystemCall.futexWake(word.address, count: 1)
        }
    }

    @inline(__always)
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    private func lockSlow() {
        #if DEBUG
            defer { noteAcquired() }
        #endif
        let atomic = word.pointer
        var spin = SpinWait.forLock()
        while spin.spin() {
            if atomic.pointee.load(ordering: .relaxed) == 0,
                atomic.pointee.compareExchange(
                    expected: 0, desired: 1, successOrdering: .acquiring,
                    failureOrdering: .relaxed
                ).exchanged
            {
                return
            }
        }
        // Announce a sleeper (2) and sleep while the word stays 2; acquire with 2 kept, since
        // others may still sleep.
        while atomic.pointee.exchange(2, ordering: .acquiring) != 0 {
            _ = SystemCall.futexWait(word.address, expected: 2, timeout: nil)
        }
    }

    /// Debug builds: stops the process unless the calling thread holds the lock (`lock` names it in
    /// the message; `function` is the `…Locked` function or accessor that needs it). Release
    /// builds: nothing.
    @inline(__always)
    func assertHeld(
        _ lock: StaticString, function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line
    ) {
        #if DEBUG
            let id = holder.pointer.pointee.load(ordering: .relaxed)
            if id != SystemCall.currentThreadID {
                lockNotHeld(
                    lock, by: function, holder: id == 0 ? "nobody holds it" : "it is held by thread \(id)",
                    file: file, line: line)
            }
        #endif
    }

    #if DEBUG
        private func noteAcquired() { holder.pointer.pointee.store(SystemCall.currentThreadID, ordering: .relaxed) }

        private func noteReleasing() { holder.pointer.pointee.store(0, ordering: .relaxed) }
    #endif
}
