// DispatchManager+OwnedDescriptors: descriptors a source owns and the manager only watches: a
// process source's pidfd (one-shot readable: the process exited) and a memory-pressure source's
// PSI triggers (level-triggered EPOLLPRI). Each registration's data word carries a generation, so
// events of a descriptor closed and its number reused never reach the new owner. Registration from
// any thread under `lock`; the source closes its descriptor after `unwatchOwned` returns.
// `ownedReady` on the manager thread, telling the source after releasing `lock`.
extension DispatchManager {
    /// Adds `fd` (owned by `source`) to the epoll set for `events` (level-triggered unless
    /// `events` has EPOLLONESHOT). Returns 0 or the errno of epoll_ctl.
    func watchOwned(_ fd: Int32, events: UInt32, source: TKDispatchSource) -> Int32 {
        lock.lock()
        ownedGeneration = (ownedGeneration &+ 1) & 0x7FFF_FFFF
        let token = DispatchManager.ownedTokenFlag | ownedGeneration << 32 | UInt64(UInt32(bitPattern: fd))
        let error = poll.add(fd, events: events, data: token)
        guard error == 0 else {
            lock.unlock()
            return error
        }
        owned[fd] = (source, ownedGeneration)
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
        return 0
    }

    /// Removes `fd` from the epoll set; the source closes it after this returns.
    func unwatchOwned(_ fd: Int32) {
        lock.withLock {
            if owned.removeValue(forKey: fd) != nil { poll.remove(fd) }
        }
    }

    /// The descriptor behind `token` is ready; told to its source if the token is still current.
    /// Manager thread, no lock held while the source is told.
    func ownedReady(_ token: UInt64, _ events: UInt32) {
        let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: token))
        let generation = (token >> 32) & 0x7FFF_FFFF
        let source = lock.withLock { () -> TKDispatchSource? in
            guard let entry = owned[fd], entry.generation == generation else { return nil }
            return entry.source
        }
        source?.ownedDescriptorReady(fd, events: events)
    }
}
