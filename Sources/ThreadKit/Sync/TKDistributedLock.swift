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
//
// Another user may share the directory (issue 15, items 9–11). Every file is opened only if it is
// a regular file (O_NOFOLLOW | O_NONBLOCK, then fstat): a FIFO planted at the lock path or a
// symbolic link at the `.break` path is reported, never read, followed or blocked on. Every wait
// is bounded (the break guard's flock is tried until a deadline). A holder is declared dead only
// when that is proved: same host, same boot, same PID namespace, and the pid either names no
// process (kill: ESRCH) or one whose /proc entry shows a zombie or a later start time. A holder
// whose /proc entry cannot be read (hidepid=2) is alive as far as we can tell.
import FoundationEssentials
import Glibc

// safety: the mutable state is `Protected`; the rest is immutable.
/// A lock that works across processes and hosts sharing a directory (NSDistributedLock).
/// `tryLock` never blocks. A holder that crashes leaves the lock taken until someone calls
/// `breakLock()`; `holder` tells who holds it and whether that process is certainly gone.
public final class TKDistributedLock: @unchecked Sendable {
    /// Who holds a lock, from its owner record.
    public struct Holder: Sendable, Equatable {
        /// The host name of the holder's machine, as it wrote it into the owner record.
        public let host: String
        /// The holder's process id, on `host` (and in the holder's PID namespace).
        public let pid: Int32
        /// When the lock was taken.
        public let date: Date
        /// True only when the holder's death is proved: it ran on this host, in this boot and in
        /// this PID namespace, and its process is gone (no such process, a zombie, or a different
        /// process reusing the pid). A lock held from another host, another boot (a host name
        /// shared by two machines), another PID namespace (a container), by a process whose /proc
        /// entry is hidden (hidepid=2), or through something that is not a lock record is never
        /// reported dead.
        public let isDefinitelyDead: Bool
        /// Why `isDefinitelyDead` is what it is, in words.
        public let verdict: String
    }

    /// The path of the lock's entry, as given to ``init(path:)``.
    public let path: String
    /// The nonce of the record this object linked, while it holds the lock.
    private let held = Protected<String?>(nil)
    /// Why the last `tryLock()` failed for a reason other than the lock being held (nil after a
    /// success or a plain "held"). Guarded by its Protected lock.
    private let failure = Protected<TKError?>(nil)
    /// The directory holding the lock's entry.
    private let directory: String

    /// How long `breakLockIfHolderIsDead()` waits for other breakers (and for a break guard held
    /// by someone who never lets go) before it throws.
    public static let defaultBreakWait: Duration = .seconds(5)

    /// A lock whose entry is `path`. Its directory must exist (it is not created).
    public init(path: String) throws {
        let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let parent = directory.isEmpty ? (path.hasPrefix("/") ? "/" : ".") : directory
        guard let status = SystemCall.status(parent), status.isDirectory else {
            throw TKError(
                .invalidArgument,
                "TKDistributedLock(path: \"\(path)\"): the directory \"\(parent)\" does not exist. "
                    + "Fix: create the directory first (the lock only creates its own entry).")
        }
        self.path = path
        self.directory = parent
    }

    /// Takes the lock if nobody holds it; never blocks. False when it is held (by anyone,
    /// including this object) or the entry cannot be created: then `lastError` says why (a
    /// directory this process may not write, something planted at the lock path), and
    /// `tryLockOrThrow()` throws it.
    public func tryLock() -> Bool {
        (try? tryLockOrThrow()) ?? false
    }

    /// As `tryLock()`, but a failure that retrying cannot cure throws a `TKError` naming the
    /// directory or what was found: the directory cannot be written (EACCES, EROFS, ENOSPC…:
    /// `.systemCall` with that errno), or the lock path holds something that is not a lock file
    /// (a FIFO, a symbolic link, a directory: `.invalidArgument`). False only when the lock is
    /// held (by anyone, including this object).
    public func tryLockOrThrow() throws -> Bool {
        do {
            let taken = try held.withLock { identity -> Bool in
                guard identity == nil else { return false }
                return try take(&identity)
            }
            failure.current = nil
            return taken
        } catch let error as TKError {
            failure.current = error
            throw error
        }
    }

    /// Why the last `tryLock()` returned false other than because the lock is held; nil when it
    /// returned true or the lock was simply held.
    public var lastError: TKError? { failure.current }

    /// Steps 1–3 of the file comment. Caller holds `held`'s lock with no lock held by this object.
    private func take(_ identity: inout String?) throws -> Bool {
        let nonce = String(UInt64.random(in: 0...UInt64.max), radix: 36)
        let record = Self.ownerRecord(nonce)
        let temporary = "\(path).\(SystemCall.hostName).\(getpid()).\(UInt64.random(in: 0...UInt64.max))"
        let created = SystemCall.createExclusive(temporary, contents: record)
        guard created == 0 else {
            throw TKError(
                .systemCall,
                "TKDistributedLock(\"\(path)\").tryLock(): cannot create an entry in the directory "
                    + "\"\(directory)\" (\(SystemCall.errnoName(created))). Fix: use a directory this process can write "
                    + "(uid \(geteuid())), on a writable file system with space left.", errno: created)
        }
        defer { _ = SystemCall.unlink(temporary) }
        let linked = SystemCall.link(temporary, path)
        guard linked == 0 || Self.linkCountIsTwo(temporary) else {
            if linked == EEXIST, let status = SystemCall.linkStatus(path), !status.isRegular {
                throw plantedError("tryLock()", found: "a \(status.kind) owned by uid \(status.owner)")
            }
            if linked == EEXIST || linked == ENOENT { return false }
            throw TKError(
                .systemCall,
                "TKDistributedLock(\"\(path)\").tryLock(): link(2) into the directory \"\(directory)\" "
                    + "failed (\(SystemCall.errnoName(linked))). Fix: use a local or NFS directory that supports hard links.",
                errno: linked)
        }
        identity = nonce
        return true
    }

    /// Something that is not a lock file sits at the lock path.
    private func plantedError(_ call: String, found: String) -> TKError {
        TKError(
            .invalidArgument,
            "TKDistributedLock(\"\(path)\").\(call): \(found) is at the lock path, not a lock "
                + "file; it is never opened or followed, and the lock cannot be taken while it is there. Fix: find out who put "
                + "it there, remove it, and keep the lock directory writable only by trusted users (or sticky, as /tmp).")
    }

    /// Releases the lock. Throws `.notLockOwner` when this object does not hold it, or when it was
    /// broken (and possibly taken by someone else) since this object took it.
    public func unlock() throws {
        try held.withLock { identity in
            guard let mine = identity else {
                throw TKError(
                    .notLockOwner,
                    "TKDistributedLock(\"\(path)\").unlock(): this object does not hold the lock. "
                        + "Fix: unlock only after a successful tryLock(), once.")
            }
            identity = nil
            let aside = "\(path).unlocking.\(getpid()).\(UInt64.random(in: 0...UInt64.max))"
            let moved = SystemCall.rename(path, aside)
            if moved == ENOENT {
                throw TKError(
                    .notLockOwner,
                    "TKDistributedLock(\"\(path)\").unlock(): the lock was broken since this object took it. "
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
            throw TKError(
                .notLockOwner,
                "TKDistributedLock(\"\(path)\").unlock(): the lock was broken and is now held by "
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
    ///
    /// The guard is opened only as a regular file (a symbolic link or FIFO at `path.break` is
    /// reported with a thrown `TKError`, never followed) and waited for at most
    /// `defaultBreakWait`: a guard someone holds for longer throws instead of hanging.
    public func breakLockIfHolderIsDead() throws -> Bool {
        try breakLockIfHolderIsDead(waitingAtMost: Self.defaultBreakWait)
    }

    /// As `breakLockIfHolderIsDead()`, waiting at most `limit` for the break guard.
    public func breakLockIfHolderIsDead(waitingAtMost limit: Duration) throws -> Bool {
        guard try checkedHolder("breakLockIfHolderIsDead()")?.isDefinitelyDead == true else { return false }
        let guardPath = path + ".break"
        let fd: Int32
        switch SystemCall.openRegular(guardPath, O_RDONLY | O_CREAT, mode: 0o644) {
        case .success(let opened): fd = opened
        case .failure(let refusal):
            if let found = refusal.found {
                throw TKError(
                    .invalidArgument,
                    "TKDistributedLock(\"\(path)\").breakLockIfHolderIsDead(): \(found) at the "
                        + "break guard \"\(guardPath)\"; it is never followed or opened. Fix: remove it, and keep the lock "
                        + "directory writable only by trusted users (or sticky, as /tmp).")
            }
            throw TKError(
                .systemCall,
                "TKDistributedLock(\"\(path)\").breakLockIfHolderIsDead(): cannot open the break guard "
                    + "\"\(guardPath)\" (\(refusal.description)). Fix: make the directory \"\(directory)\" writable for "
                    + "this process, or remove a guard another user left unreadable.", errno: refusal.errno)
        }
        defer { close(fd) }
        let deadline = ContinuousClock.now + limit
        var pause: Duration = .microseconds(100)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            guard error == EWOULDBLOCK || error == EINTR else {
                throw TKError.systemCall("flock", errno: error, "TKDistributedLock \"\(path)\"")
            }
            guard ContinuousClock.now < deadline else {
                throw TKError(
                    .systemCall,
                    "TKDistributedLock(\"\(path)\").breakLockIfHolderIsDead(): the break guard "
                        + "\"\(guardPath)\" stayed locked by another process for \(limit). Fix: find the process holding it "
                        + "(fuser/lsof), or retry later.", errno: EWOULDBLOCK)
            }
            TKThread.sleep(for: min(pause, max(deadline - ContinuousClock.now, .zero)))
            pause = min(pause * 2, .milliseconds(50))
        }
        defer { _ = flock(fd, LOCK_UN) }
        // Under the guard only a dead holder or another guarded breaker could change the entry, so
        // what is read here is what gets removed.
        guard try checkedHolder("breakLockIfHolderIsDead()")?.isDefinitelyDead == true else { return false }
        let r = SystemCall.unlink(path)
        guard r == 0 || r == ENOENT else { throw TKError.systemCall("unlink", errno: r, "TKDistributedLock \"\(path)\"") }
        return r == 0
    }

    /// When the lock was taken (by anyone); nil when it is not held.
    public var lockDate: Date? { holder?.date }

    /// Who holds the lock, nil when nobody does. Never blocks: something other than a regular
    /// file at the lock path (a FIFO, a symbolic link) is reported as a holder with an empty host
    /// that is not dead, its `verdict` saying what was found.
    public var holder: Holder? {
        switch readHolder() {
        case .none: return nil
        case .holder(let holder): return holder
        case .planted(let found):
            let status = SystemCall.linkStatus(path)
            let seconds = status.map { Double($0.modified.tv_sec) + Double($0.modified.tv_nsec) / 1e9 } ?? 0
            return Holder(
                host: "", pid: 0, date: Date(timeIntervalSince1970: seconds), isDefinitelyDead: false,
                verdict: "\(found) is at the lock path, not a lock file")
        }
    }

    /// `holder`, throwing when something other than a lock file sits at the lock path.
    private func checkedHolder(_ call: String) throws -> Holder? {
        switch readHolder() {
        case .none: return nil
        case .holder(let holder): return holder
        case .planted(let found): throw plantedError(call, found: found)
        }
    }

    private enum Reading { case none, holder(Holder), planted(String) }

    private func readHolder() -> Reading {
        guard let status = SystemCall.linkStatus(path) else { return .none }
        let modified = Date(timeIntervalSince1970: Double(status.modified.tv_sec) + Double(status.modified.tv_nsec) / 1e9)
        let text: String
        switch SystemCall.readRegularFile(path) {
        case .success(let read): text = read
        case .failure(let refusal):
            if refusal.errno == ENOENT { return .none } // released meanwhile
            if let found = refusal.found { return .planted(found) }
            return .holder(
                Holder(
                    host: "", pid: 0, date: modified, isDefinitelyDead: false,
                    verdict: "the owner record cannot be read (\(refusal.description))"))
        }
        let fields = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard fields.count >= 4, let pid = Int32(fields[1]), let start = UInt64(fields[2]), let seconds = Double(fields[3]) else {
            // Not a record of ours: only its age is known.
            return .holder(Holder(host: "", pid: 0, date: modified, isDefinitelyDead: false, verdict: "not an owner record"))
        }
        let record = OwnerRecord(
            host: fields[0], pid: pid, start: start,
            bootID: fields.count > 5 ? fields[5] : "", pidNamespace: fields.count > 6 ? fields[6] : "")
        let (dead, verdict) = record.deathProof()
        return .holder(
            Holder(
                host: record.host, pid: pid, date: Date(timeIntervalSince1970: seconds),
                isDefinitelyDead: dead, verdict: verdict))
    }

    /// "host\npid\nstart-ticks\nunix-seconds\nnonce\nboot-id\npid-namespace\n" (the first five as
    /// written by earlier versions, which readers of those versions still understand).
    private static func ownerRecord(_ nonce: String) -> String {
        let pid = getpid()
        let start = SystemCall.processStart(pid)?.start ?? 0
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seconds = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        return "\(SystemCall.hostName)\n\(pid)\n\(start)\n\(seconds)\n\(nonce)\n\(SystemCall.bootID)\n\(SystemCall.pidNamespace)\n"
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
