// DispatchManager+Descriptors: read and write sources on the manager's poll. One registration per
// descriptor number (data word `fdTokenBase + fd`), one-shot: a direction is re-armed after the
// handler of each of its sources ran, so a descriptor that stays ready does not spin the manager.
// A descriptor epoll refuses with EPERM (a regular file, a directory) counts as always ready.
// `watch`, `unwatch` and `rearm` from any thread under `lock` (EventPoll's `add`/`change`/`remove`
// are called under it: they take no lock); `descriptorReady` on the manager thread, which tells
// sources after releasing `lock`.
import Glibc

extension DispatchManager {
    /// The sources watching one descriptor, and which directions are armed in epoll.
    struct Watch {
        var readers: [TKDispatchSource] = []
        var writers: [TKDispatchSource] = []
        var armedRead = false
        var armedWrite = false
        /// epoll refused the descriptor (a regular file): it counts as always ready.
        var alwaysReady = false
        var registered = false
    }

    /// What `watch` found: epoll watches the descriptor; or epoll refuses it with EPERM (a regular
    /// file or a directory) and it counts as always ready, as libdispatch treats them; or epoll
    /// refuses it otherwise (EBADF: not open), with that errno.
    enum WatchResult: Equatable { case watching, alwaysReady, refused(Int32) }

    /// Starts watching `fd` for `source` (readability, or writability if `write`). Calls nothing on
    /// the source: the caller (which may hold the source's lock) merges readiness for `.alwaysReady`
    /// after unlocking.
    func watch(_ fd: Int32, write: Bool, source: TKDispatchSource) -> WatchResult {
        lock.lock()
        var w = watches[fd] ?? Watch()
        if !w.registered && !w.alwaysReady {
            let error = poll.add(fd, events: interest(armedRead: !write, armedWrite: write), data: token(fd))
            if error == 0 {
                w.registered = true
            } else if error == EPERM {
                w.alwaysReady = true
            } else {
                lock.unlock()
                return .refused(error)
            }
        }
        if write {
            w.writers.append(source)
            w.armedWrite = true
        } else {
            w.readers.append(source)
            w.armedRead = true
        }
        if w.registered {
            poll.change(fd, events: interest(w), data: token(fd))
        }
        let result: WatchResult = w.alwaysReady ? .alwaysReady : .watching
        watches[fd] = w
        let start = startThreadLocked()
        lock.unlock()
        if start { startThread() }
        return result
    }

    /// Stops watching `fd` for `source`.
    func unwatch(_ fd: Int32, source: TKDispatchSource) {
        lock.withLock {
            guard var w = watches[fd] else { return }
            w.readers.removeAll { $0 === source }
            w.writers.removeAll { $0 === source }
            if w.readers.isEmpty { w.armedRead = false }
            if w.writers.isEmpty { w.armedWrite = false }
            if w.readers.isEmpty && w.writers.isEmpty {
                if w.registered { poll.remove(fd) }
                watches[fd] = nil
            } else {
                if w.registered { poll.change(fd, events: interest(w), data: token(fd)) }
                watches[fd] = w
            }
        }
    }

    /// Re-arms `fd` for `source` after its handler ran (descriptors are one-shot, so one that stays
    /// ready is reported once per handler run, not in a loop).
    func rearm(_ fd: Int32, write: Bool, source: TKDispatchSource) {
        let ready = lock.withLock { () -> Bool in
            guard var w = watches[fd] else { return false }
            let list = write ? w.writers : w.readers
            guard list.contains(where: { $0 === source }) else { return false }
            if write { w.armedWrite = true } else { w.armedRead = true }
            if w.registered { poll.change(fd, events: interest(w), data: token(fd)) }
            watches[fd] = w
            return w.alwaysReady
        }
        if ready { source.mergeReadiness() }
    }

    /// The data word of `fd`'s registration (`wait` reports it as the token).
    private func token(_ fd: Int32) -> UInt64 { DispatchManager.fdTokenBase + UInt64(fd) }

    private func interest(_ w: Watch) -> UInt32 { interest(armedRead: w.armedRead, armedWrite: w.armedWrite) }

    private func interest(armedRead: Bool, armedWrite: Bool) -> UInt32 {
        (armedRead ? EventPoll.pollIn : 0) | (armedWrite ? EventPoll.pollOut : 0) | EventPoll.pollOneShot
    }

    /// `fd` is ready (`events`: epoll's bits). Manager thread.
    func descriptorReady(_ fd: Int32, _ events: UInt32) {
        let problem = events & (EventPoll.pollErr | EventPoll.pollHup) != 0
        let ready = lock.withLock { () -> [TKDispatchSource] in
            guard var w = watches[fd] else { return [] }
            var ready: [TKDispatchSource] = []
            if w.armedRead && (events & EventPoll.pollIn != 0 || problem) {
                w.armedRead = false
                ready += w.readers
            }
            if w.armedWrite && (events & EventPoll.pollOut != 0 || problem) {
                w.armedWrite = false
                ready += w.writers
            }
            // One-shot disarmed every direction: re-arm those that did not fire.
            if w.registered && (w.armedRead || w.armedWrite) {
                poll.change(fd, events: interest(w), data: token(fd))
            }
            watches[fd] = w
            return ready
        }
        for source in ready { source.mergeReadiness() }
    }
}
