// DispatchManager+FileEvents: file-system object sources on one inotify instance (made on first
// use, level-triggered in the poll under data word `inotifyToken`, kept for the process). A watch
// descriptor is held by every source made on its object (counted; the last release removes the
// inotify watch) and routed to the active ones. Registration from any thread under `lock`;
// `fileEventsReady` reads the events on the manager thread and tells sources after releasing it.
import CThreadKit
import Glibc

extension DispatchManager {
    /// Adds an inotify watch on `path` (the object behind /proc/self/fd/N) held by one more
    /// source. Returns the watch descriptor, or the errno that refused it (negated).
    func holdFileWatch(path: String) -> Int32 {
        lock.withLock {
            if inotifyFD < 0 {
                let fd = tk_inotify_init()
                guard fd >= 0 else { return -errno }
                let error = poll.add(fd, events: EventPoll.pollIn, data: DispatchManager.inotifyToken)
                guard error == 0 else {
                    close(fd)
                    return -error
                }
                inotifyFD = fd
            }
            let wd = tk_inotify_watch(inotifyFD, path)
            guard wd >= 0 else { return -errno }
            inotifyHolders[wd, default: 0] += 1
            return wd
        }
    }

    /// One source no longer holds `wd`; the last one removes the inotify watch.
    func releaseFileWatch(_ wd: Int32) {
        lock.withLock {
            if DispatchManager.dropHolder(wd, from: &inotifyHolders) { _ = tk_inotify_unwatch(inotifyFD, wd) }
        }
    }

    /// Routes the events of `wd` to `source` from now on (it is active).
    func watchFile(_ wd: Int32, source: TKDispatchSource) {
        register { inotifySources[wd, default: []].append(source) }
    }

    func unwatchFile(_ wd: Int32, source: TKDispatchSource) {
        lock.withLock {
            inotifySources[wd]?.removeAll { $0 === source }
            if inotifySources[wd]?.isEmpty == true { inotifySources[wd] = nil }
        }
    }

    /// Reads every pending inotify event and hands each watched object's events to its sources.
    /// Manager thread; sources are told with no lock held.
    func fileEventsReady() {
        var wds = [Int32](repeating: 0, count: 256)
        var masks = [UInt32](repeating: 0, count: 256)
        while true {
            let ifd = lock.withLock { inotifyFD }
            // safety: both arrays hold 256 elements, alive and unmoved for the call, which writes
            // at most 256 (the count passed).
            let n = wds.withUnsafeMutableBufferPointer { w in
                masks.withUnsafeMutableBufferPointer { m in tk_inotify_read(ifd, w.baseAddress, m.baseAddress, 256) }
            }
            if n <= 0 { return }
            for i in 0..<Int(n) {
                let sources = lock.withLock { () -> [TKDispatchSource] in
                    if masks[i] & 0x8000 != 0 { inotifyHolders[wds[i]] = nil } // IN_IGNORED: the watch is gone
                    return inotifySources[wds[i]] ?? []
                }
                for source in sources { source.fileSystemObjectChanged(inotifyMask: masks[i]) }
            }
        }
    }
}
