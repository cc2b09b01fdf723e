// TKDispatchSource+FileSystemObject: vnode sources (DispatchSource.makeFileSystemObjectSource)
// over inotify. The watch is taken on the object behind /proc/self/fd/N (the magic link resolves
// to the open file itself, even once it is unlinked or renamed), held from the source's creation
// until it is cancelled or freed, and shared by every source on the same object (the manager
// counts holders). inotify says "modified" and "attributes changed"; the source tells extend,
// link and delete apart by comparing the object's size and link count with what it saw last
// (state.fileSize/fileLinks, guarded by the source's lock, read and written on the manager thread).
import CThreadKit
import Glibc

extension TKDispatchSource {
    /// File-system object events (DispatchSource.FileSystemEvent, kqueue's NOTE_* values). `data`
    /// of such a source is the union of the events seen since the last handler run:
    /// `FileSystemEvent(rawValue: source.data)`. On Linux:
    ///
    /// | event     | inotify and fstat                                                            |
    /// |-----------|------------------------------------------------------------------------------|
    /// | `.write`  | IN_MODIFY; for a directory, an entry created, deleted or moved in or out      |
    /// | `.extend` | the size grew (seen at any event)                                            |
    /// | `.attrib` | IN_ATTRIB with the link count unchanged (mode, owner, times, xattrs)          |
    /// | `.link`   | the link count changed and is not 0                                          |
    /// | `.delete` | the link count fell to 0 (the last name unlinked), or IN_DELETE_SELF          |
    /// | `.rename` | IN_MOVE_SELF                                                                 |
    /// | `.revoke` | IN_UNMOUNT: its file system was unmounted (Linux has no revoke(2))            |
    public struct FileSystemEvent: OptionSet, Sendable, Hashable {
        /// The bits of the set: kqueue's `NOTE_DELETE` (0x1) … `NOTE_REVOKE` (0x40).
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`, such as a source's `data`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The object's last name was unlinked, or it was deleted (`NOTE_DELETE`).
        public static let delete = FileSystemEvent(rawValue: 0x1)
        /// The object's contents changed; for a directory, an entry came or went (`NOTE_WRITE`).
        public static let write = FileSystemEvent(rawValue: 0x2)
        /// The object grew (`NOTE_EXTEND`).
        public static let extend = FileSystemEvent(rawValue: 0x4)
        /// Its attributes changed: mode, owner, times, extended attributes (`NOTE_ATTRIB`).
        public static let attrib = FileSystemEvent(rawValue: 0x8)
        /// Its link count changed without reaching 0 (`NOTE_LINK`).
        public static let link = FileSystemEvent(rawValue: 0x10)
        /// It was renamed or moved (`NOTE_RENAME`).
        public static let rename = FileSystemEvent(rawValue: 0x20)
        /// Its file system was unmounted (`NOTE_REVOKE`; Linux has no revoke(2)).
        public static let revoke = FileSystemEvent(rawValue: 0x40)
        /// Every event above.
        public static let all: FileSystemEvent = [.delete, .write, .extend, .attrib, .link, .rename, .revoke]
    }

    // inotify event bits (<sys/inotify.h>).
    private static let inModify: UInt32 = 0x2, inAttrib: UInt32 = 0x4, inMovedFrom: UInt32 = 0x40
    private static let inMovedTo: UInt32 = 0x80, inCreate: UInt32 = 0x100, inDelete: UInt32 = 0x200
    private static let inDeleteSelf: UInt32 = 0x400, inMoveSelf: UInt32 = 0x800, inUnmount: UInt32 = 0x2000
    private static let inNamed: UInt32 = 0x8000_0000 // TK_INOTIFY_NAMED

    /// A source for changes of the file or directory open as `fileDescriptor`, delivered on
    /// `queue`. Keep the descriptor open until the source is cancelled. Throws `TKError`:
    /// `.invalidArgument` for an empty mask or a descriptor that is not open; `.systemCall` when
    /// inotify refuses (its watch limit, /proc not mounted).
    public static func makeFileSystemObjectSource(
        fileDescriptor: Int32, eventMask: FileSystemEvent,
        queue: TKDispatchQueue
    ) throws -> TKDispatchSource {
        let call = "TKDispatchSource.makeFileSystemObjectSource(fileDescriptor: \(fileDescriptor))"
        guard !eventMask.isEmpty, eventMask.isSubset(of: .all) else {
            throw TKError(
                .invalidArgument,
                "\(call): the mask 0x\(String(eventMask.rawValue, radix: 16)) names no event "
                    + "this source reports. Fix: pass some of .delete, .write, .extend, .attrib, .link, .rename, .revoke.")
        }
        var size: Int64 = 0
        var links: UInt64 = 0
        guard fileDescriptor >= 0, tk_fd_size_links(fileDescriptor, &size, &links) == 0 else {
            throw TKError(
                .invalidArgument,
                "\(call): the descriptor is not open (EBADF). Fix: open the file or "
                    + "directory first and keep it open until the source is cancelled.")
        }
        let wd = DispatchManager.shared.holdFileWatch(path: "/proc/self/fd/\(fileDescriptor)")
        guard wd >= 0 else {
            throw TKError.systemCall(
                "inotify_add_watch", errno: -wd,
                "\(call) (the per-user watch limit is /proc/sys/fs/inotify/max_user_watches)")
        }
        let source = TKDispatchSource(kind: .fileSystemObject(fileDescriptor), queue: queue, eventMask: eventMask.rawValue)
        source.state.watchDescriptor = wd
        source.state.fileSize = size
        source.state.fileLinks = links
        return source
    }

    /// inotify reported `inotifyMask` for the watched object (manager thread, no lock held).
    func fileSystemObjectChanged(inotifyMask m: UInt32) {
        guard case .fileSystemObject(let fd) = kind else { return }
        typealias S = TKDispatchSource
        var events: FileSystemEvent = []
        lock.lock()
        guard state.lifecycle == .active else { return lock.unlock() }
        if m & S.inNamed != 0 {
            // About an entry of a watched directory: only its creation, deletion or move changes
            // the directory itself.
            if m & (S.inCreate | S.inDelete | S.inMovedFrom | S.inMovedTo) != 0 { events.insert(.write) }
        } else {
            if m & S.inModify != 0 { events.insert(.write) }
            if m & S.inMoveSelf != 0 { events.insert(.rename) }
            if m & S.inDeleteSelf != 0 { events.insert(.delete) }
            if m & S.inUnmount != 0 { events.insert(.revoke) }
        }
        var size: Int64 = 0
        var links: UInt64 = 0
        if tk_fd_size_links(fd, &size, &links) == 0 {
            if size > state.fileSize { events.insert(.extend) }
            if links != state.fileLinks {
                events.insert(links == 0 ? .delete : .link)
            } else if m & S.inAttrib != 0 && m & S.inNamed == 0 {
                events.insert(.attrib)
            }
            state.fileSize = size
            state.fileLinks = links
        } else if m & S.inAttrib != 0 && m & S.inNamed == 0 {
            events.insert(.attrib)
        }
        lock.unlock()
        let watched = events.rawValue & eventMask
        if watched != 0 { merge(watched) }
    }
}
