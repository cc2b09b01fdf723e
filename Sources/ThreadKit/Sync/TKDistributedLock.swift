// TKDistributedLock: NSDistributedLock, a lock shared by processes (and hosts) through an entry in
// a shared directory. Thread-safe: `held` (the identity of the entry this object created) is
// guarded by its Protected lock; everything else is the file system's business.
// Identity: every record carries a random nonce. Inode numbers are no proof of identity: a broken
// lock's inode is often reused at once for the next holder's entry.
//
// Taking the lock (tryLock), NFS-safe:
//   1. write the owner record (host, pid, process start time, date) to a unique temporary file in
//      the lock's directory;
//   2. link(2) it to the lock path: atomic, and it fails if the path exists — so the record is
//      complete before the lock exists, and a holder killed at any point never leaves a
//      half-written lock;
//   3. remove the temporary name; remember the record's nonce.
// Releasing (unlock) renames the entry away first, so a lock that was broken and taken by someone
// else between our check and our removal is never deleted by us (it is linked back).
import FoundationEssentials
import Glibc

/// A lock that works across processes and hosts sharing a directory (NSDistributedLock).
/// `tryLock` never blocks. A holder that crashes leaves the lock taken until someone calls
/// `breakLock()`; `holder` tells who holds it and whether that process is certainly gone.
public final class TKDistributedLock: @unchecked Sendable {
    /// Who holds a lock, from its owner record.
    public struct Holder: Sendable, Equatable {
        public let host: String
        public let pid: Int32
        /// When the lock was taken.
        public let date: Date
        /// True only when the holder ran on this host and its process is gone (no such process, a
        /// zombie, or a different process reusing the pid). A lock held from another host is
        /// never reported dead.
        public let isDefinitelyDead: Bool
    }

    public let path: String
    /// The nonce of the record this object linked, while it holds the lock.
    private let held = Protected<String?>(nil)

    /// A lock whose entry is `path`. Its directory must exist (it is not created).
    public init(path: String) throws {
        let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let parent = directory.isEmpty ? (path.hasPrefix("/") ? "/" : ".") : directory
        guard let status = SystemCall.status(parent), status.isDirectory else {
            throw TKError(.invalidArgument, "TKDistributedLock(path: \"\(path)\"): the directory \"\(parent)\" does not exist. "
                          + "Fix: create the directory first (the lock only creates its own entry).")
        }
        self.path = path
    }

    /// Takes the lock if nobody holds it; never blocks. False when it is held (by anyone,
    /// including this object) or the entry cannot be created (see `holder`).
    public func tryLock() -> Bool {
        held.withLock { identity -> Bool in
            guard identity == nil else { return false }
            let nonce = String(UInt64.random(in: 0...UInt64.max), radix: 36)
            let record = Self.ownerRecord(nonce)
            let temporary = "\(path).\(SystemCall.hostName).\(getpid()).\(UInt64.random(in: 0...UInt64.max))"
            guard SystemCall.createExclusive(temporary, contents: record) == 0 else { return false }
            defer { _ = SystemCall.unlink(temporary) }
            let linked = SystemCall.link(temporary, path)
            guard linked == 0 || Self.linkCountIsTwo(temporary) else { return false }
            identity = nonce
            return true
        }
    }

    /// Releases the lock. Throws `.notLockOwner` when this object does not hold it, or when it was
    /// broken (and possibly taken by someone else) since this object took it.
    public func unlock() throws {
        try held.withLock { identity in
            guard let mine = identity else {
                throw TKError(.notLockOwner, "TKDistributedLock(\"\(path)\").unlock(): this object does not hold the lock. "
                              + "Fix: unlock only after a successful tryLock(), once.")
            }
            identity = nil
            let aside = "\(path).unlocking.\(getpid()).\(UInt64.random(in: 0...UInt64.max))"
            let moved = SystemCall.rename(path, aside)
            if moved == ENOENT {
                throw TKError(.notLockOwner, "TKDistributedLock(\"\(path)\").unlock(): the lock was broken since this object took it. "
                              + "Fix: treat the protected resource as possibly changed by another holder.")
            }
            guard moved == 0 else { throw TKError.systemCall("rename", errno: moved, "TKDistributedLock \"\(path)\"") }
            if Self.nonce(ofRecordAt: aside) == mine {
                _ = SystemCall.unlink(aside)
                return
            }
            // Someone broke our lock and took it: put theirs back and report ours as lost.
            _ = SystemCall.link(aside, path)
            _ = SystemCall.unlink(aside)
            throw TKError(.notLockOwner, "TKDistributedLock(\"\(path)\").unlock(): the lock was broken and is now held by "
                          + "someone else. Fix: treat the protected resource as possibly changed by another holder.")
        }
    }

    /// Removes the lock whoever holds it (use it when the holder is known to be dead: see
    /// `holder`). Breaking a lock nobody holds is not an error.
    public func breakLock() throws {
        let r = SystemCall.unlink(path)
        guard r == 0 || r == ENOENT else { throw TKError.systemCall("unlink", errno: r, "TKDistributedLock \"\(path)\".breakLock()") }
        held.withLock { identity in
            if identity != nil { identity = nil }
        }
    }

    /// Breaks the lock only if its holder is definitely dead (see `Holder.isDefinitelyDead`), and
    /// only that lock: when several processes race to break the same stale lock, exactly one does,
    /// and a lock taken meanwhile by a live process is never broken. Returns whether it broke one.
    ///
    /// Breakers serialize on an flock(2) of `path.break` (released by the kernel if a breaker
    /// dies), re-read the holder under it, and remove the entry only while it still names the dead
    /// holder. A dead holder is only ever reported for this host, so all breakers of one stale
    /// lock run on the host where flock sees them all.
    public func breakLockIfHolderIsDead() throws -> Bool {
        guard holder?.isDefinitelyDead == true else { return false }
        let guardPath = path + ".break"
        let fd = open(guardPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TKError.systemCall("open", errno: errno, "TKDistributedLock \"\(path)\".breakLockIfHolderIsDead()") }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw TKError.systemCall("flock", errno: errno, "TKDistributedLock \"\(path)\"") }
        }
        defer { _ = flock(fd, LOCK_UN) }
        // Under the guard only a dead holder or another guarded breaker could change the entry, so
        // what is read here is what gets removed.
        guard holder?.isDefinitelyDead == true else { return false }
        let r = SystemCall.unlink(path)
        guard r == 0 || r == ENOENT else { throw TKError.systemCall("unlink", errno: r, "TKDistributedLock \"\(path)\"") }
        return r == 0
    }

    /// When the lock was taken (by anyone); nil when it is not held.
    public var lockDate: Date? { holder?.date }

    /// Who holds the lock, nil when nobody does.
    public var holder: Holder? {
        guard let status = SystemCall.status(path) else { return nil }
        let fields = (SystemCall.readSmallFile(path) ?? "").split(separator: "\n").map(String.init)
        let modified = Date(timeIntervalSince1970: Double(status.modified.tv_sec) + Double(status.modified.tv_nsec) / 1e9)
        guard fields.count >= 4, let pid = Int32(fields[1]), let start = UInt64(fields[2]), let seconds = Double(fields[3]) else {
            // Not a record of ours (or unreadable): only its age is known.
            return Holder(host: "", pid: 0, date: modified, isDefinitelyDead: false)
        }
        let host = fields[0]
        var dead = false
        if host == SystemCall.hostName {
            if let process = SystemCall.processStart(pid) {
                dead = process.state == "Z" || process.start != start
            } else {
                dead = true
            }
        }
        return Holder(host: host, pid: pid, date: Date(timeIntervalSince1970: seconds), isDefinitelyDead: dead)
    }

    /// "host\npid\nstart-ticks\nunix-seconds\nnonce\n".
    private static func ownerRecord(_ nonce: String) -> String {
        let pid = getpid()
        let start = SystemCall.processStart(pid)?.start ?? 0
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seconds = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        return "\(SystemCall.hostName)\n\(pid)\n\(start)\n\(seconds)\n\(nonce)\n"
    }

    private static func nonce(ofRecordAt path: String) -> String? {
        let fields = (SystemCall.readSmallFile(path) ?? "").split(separator: "\n")
        return fields.count >= 5 ? String(fields[4]) : nil
    }

    /// NFS may report a failed link that in fact succeeded: the temporary's link count tells.
    private static func linkCountIsTwo(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && st.st_nlink == 2
    }
}
