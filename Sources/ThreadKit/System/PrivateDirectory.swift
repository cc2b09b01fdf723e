// PrivateDirectory: how ThreadKit creates every file it writes of its own accord (trace exports, the
// flight recorder's dumps). The one rule, from issue 49's hostile-user round: a file is created
// new, exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing planted at its name, a symbolic link,
// a FIFO or a file, is ever followed, opened or replaced in place), mode 0600, under a name with
// a random part nobody can predict, relative to a directory descriptor opened once and checked
// to be safe (`PrivateDirectory.open`): owned by this user or root, and, when others may write
// to it, sticky as /tmp is, so that no other user can rename or remove what is created there.
// A file written to a path the caller names (`TKTrace.writeHTML(to:)`) is written under a
// private temporary name first and renamed over the path: the path's old entry, whatever it
// was, is replaced, never written through, unless it is a device, FIFO or link that this user or
// root put there (`/dev/null`, `/dev/stdout`). The same discipline as mkstemp(3), OpenSSH's checks
// of its own directories and the kernel's fs.protected_symlinks.
//
// Stateless apart from the ~Copyable `PrivateDirectory`, which owns its descriptor and closes it
// when dropped. Any thread.
import Glibc

/// An open directory that files may be created in safely. Owns its descriptor.
struct PrivateDirectory: ~Copyable {
    let descriptor: Int32
    /// The path it was opened by, for messages.
    let path: String

    /// Why a directory or a file in it could not be used: a sentence naming what was found, and the
    /// errno when a call failed.
    struct Refusal: Error {
        let reason: String
        let errno: Int32
    }

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit { close(descriptor) }

    /// Opens `path` as a directory and checks it: a directory owned by this process's effective
    /// user or by root, and sticky when group or others may write to it.
    static func open(_ path: String) -> Result<PrivateDirectory, Refusal> {
        var fd: Int32
        repeat { fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            let error = errno
            let what = error == ENOTDIR ? "it is not a directory" : SystemCall.errnoName(error)
            return .failure(Refusal(reason: what, errno: error))
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let error = errno
            close(fd)
            return .failure(Refusal(reason: SystemCall.errnoName(error), errno: error))
        }
        if let problem = problem(owner: st.st_uid, mode: st.st_mode, user: geteuid()) {
            close(fd)
            return .failure(Refusal(reason: problem, errno: EPERM))
        }
        return .success(PrivateDirectory(descriptor: fd, path: path))
    }

    /// What makes a directory with this owner and mode unsafe to create files in for `user`; nil
    /// when it is safe. Pure: the rule the tests drive with any owner and mode.
    static func problem(owner: uid_t, mode: mode_t, user: uid_t) -> String? {
        if owner != user && owner != 0 {
            return "it is owned by uid \(owner), not by this process's user (uid \(user)) or root"
        }
        let othersMayWrite = mode & (S_IWGRP | S_IWOTH) != 0
        if othersMayWrite && mode & S_ISVTX == 0 {
            return "others may write to it (mode \(String(mode & 0o7777, radix: 8))) and it is not sticky, so another "
                + "user could replace what is created there"
        }
        return nil
    }

    /// Creates `name` in this directory exclusively with mode 0600 and returns its descriptor,
    /// open for writing. Fails with EEXIST when anything at all is at that name.
    func createExclusive(_ name: String) -> Result<Int32, Refusal> {
        var fd: Int32
        repeat {
            fd = openat(descriptor, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            let error = errno
            return .failure(Refusal(reason: SystemCall.errnoName(error), errno: error))
        }
        return .success(fd)
    }

    /// Creates a new file named `prefix` + a random part + `suffix`, trying fresh random parts while
    /// a name is taken. Returns the name and its descriptor.
    func createUnique(prefix: String, suffix: String) -> Result<(name: String, descriptor: Int32), Refusal> {
        var last = Refusal(reason: "every name tried was taken", errno: EEXIST)
        for _ in 0..<64 {
            let name = prefix + PrivateDirectory.randomPart() + suffix
            switch createExclusive(name) {
            case .success(let fd): return .success((name, fd))
            case .failure(let refusal):
                last = refusal
                if refusal.errno != EEXIST { return .failure(refusal) }
            }
        }
        return .failure(last)
    }

    /// Renames `from` to `to` within this directory, replacing whatever entry `to` names (a link
    /// is replaced, not followed). 0 or an errno value.
    func rename(_ from: String, to: String) -> Int32 {
        renameat(descriptor, from, descriptor, to) == 0 ? 0 : errno
    }

    /// Removes `name` from this directory (a file this process created and gives up on).
    func remove(_ name: String) { _ = unlinkat(descriptor, name, 0) }

    /// Twelve characters of base 36 from the system's random source: 62 bits, never guessed.
    static func randomPart() -> String {
        var generator = SystemRandomNumberGenerator()
        let raw = String(generator.next() as UInt64 >> 2, radix: 36)
        return String(repeating: "0", count: max(0, 12 - raw.count)) + raw
    }
}

extension PrivateDirectory {
    /// Splits `path` into its directory ("." when it has none) and its last component.
    static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
    }

    /// Writes a new file at `path` through `body(descriptor)`: created under a private temporary
    /// name in `path`'s directory, then renamed over `path`, so whatever another user put at
    /// `path` (a symbolic link, a FIFO, a file) is replaced and never written through, and a
    /// failed write leaves no partial file. One exception: an entry that is not a regular file
    /// and belongs to this user or root (`/dev/null`, `/dev/stdout`, a FIFO of one's own) is
    /// trusted, and written through; a FIFO without a reader is refused, never waited on. `body`
    /// returns 0 or the first errno it met. Returns nil or what went wrong.
    static func replace(_ path: String, _ body: (Int32) -> Int32) -> Refusal? {
        let (folder, name) = split(path)
        guard !name.isEmpty, name != ".", name != ".." else {
            return Refusal(reason: "the path names a directory, not a file", errno: EISDIR)
        }
        let directory: PrivateDirectory
        switch open(folder) {
        case .success(let opened): directory = opened
        case .failure(let refusal):
            return Refusal(reason: "its directory \"\(folder)\" cannot be used: \(refusal.reason)", errno: refusal.errno)
        }
        var existing = stat()
        if fstatat(directory.descriptor, name, &existing, AT_SYMLINK_NOFOLLOW) == 0, existing.st_mode & S_IFMT != S_IFREG,
            existing.st_uid == geteuid() || existing.st_uid == 0
        {
            return directory.writeThrough(name, body)
        }
        let temporary: (name: String, descriptor: Int32)
        switch directory.createUnique(prefix: "." + name.prefix(64) + ".", suffix: ".tmp") {
        case .success(let created): temporary = created
        case .failure(let refusal): return refusal
        }
        var error = body(temporary.descriptor)
        if close(temporary.descriptor) != 0 && error == 0 { error = errno }
        if error == 0 { error = directory.rename(temporary.name, to: name) }
        guard error == 0 else {
            directory.remove(temporary.name)
            return Refusal(reason: SystemCall.errnoName(error), errno: error)
        }
        return nil
    }

    /// Writes through a trusted entry that is not a regular file (a device, a FIFO, a link of
    /// this user's or root's): opened without waiting for a FIFO's reader, then made blocking.
    private func writeThrough(_ name: String, _ body: (Int32) -> Int32) -> Refusal? {
        var fd: Int32
        repeat { fd = openat(descriptor, name, O_WRONLY | O_TRUNC | O_NONBLOCK | O_CLOEXEC) } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            let error = errno
            let reason = error == ENXIO ? "it is a FIFO that no process is reading" : SystemCall.errnoName(error)
            return Refusal(reason: reason, errno: error)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var error = body(fd)
        if close(fd) != 0 && error == 0 { error = errno }
        return error == 0 ? nil : Refusal(reason: SystemCall.errnoName(error), errno: error)
    }
}
