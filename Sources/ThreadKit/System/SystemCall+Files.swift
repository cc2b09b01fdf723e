// SystemCall+Files: the file-system calls of TKDistributedLock (files ThreadKit writes of its own
// accord are created through PrivateDirectory instead), each retrying EINTR and reporting
// errno. Stateless; any thread.
import Glibc

extension SystemCall {
    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64
    }

    struct FileStatus {
        let identity: FileIdentity
        let modified: timespec
        let isDirectory: Bool
        /// What the entry is: "regular file", "directory", "FIFO", "symbolic link", "socket",
        /// "device" (for messages that report what was found).
        let kind: String
        let owner: uid_t

        init(_ st: stat) {
            identity = FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
            modified = st.st_mtim
            isDirectory = (st.st_mode & S_IFMT) == S_IFDIR
            owner = st.st_uid
            switch st.st_mode & S_IFMT {
            case S_IFREG: kind = "regular file"
            case S_IFDIR: kind = "directory"
            case S_IFIFO: kind = "FIFO"
            case S_IFLNK: kind = "symbolic link"
            case S_IFSOCK: kind = "socket"
            default: kind = "device"
            }
        }

        var isRegular: Bool { kind == "regular file" }
    }

    /// stat(2); nil with `errno` set when it fails.
    static func status(_ path: String) -> FileStatus? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return FileStatus(st)
    }

    /// lstat(2): a symbolic link is reported as itself. Nil with `errno` set when it fails.
    static func linkStatus(_ path: String) -> FileStatus? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return FileStatus(st)
    }

    /// Opens `path` only if it is a regular file: never following a symbolic link (O_NOFOLLOW),
    /// never blocking on a FIFO (O_NONBLOCK; a FIFO is then refused by fstat). Returns the
    /// descriptor, or what was found instead ("a FIFO", "a symbolic link", an errno name).
    static func openRegular(_ path: String, _ flags: Int32, mode: mode_t = 0o644) -> Result<Int32, FileRefusal> {
        var fd: Int32
        repeat { fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode) } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            let error = errno
            if error == ELOOP { return .failure(FileRefusal(found: "a symbolic link", errno: error)) }
            return .failure(FileRefusal(found: nil, errno: error))
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let error = errno
            close(fd)
            return .failure(FileRefusal(found: nil, errno: error))
        }
        let status = FileStatus(st)
        guard status.isRegular else {
            close(fd)
            return .failure(FileRefusal(found: "a \(status.kind) owned by uid \(status.owner)", errno: nil))
        }
        return .success(fd)
    }

    /// Why `openRegular` refused: something other than a regular file is there, or an errno.
    struct FileRefusal: Error {
        let found: String?
        let errno: Int32?
        var description: String {
            if let found { return "\(found) is there instead of a regular file" }
            return SystemCall.errnoName(errno ?? 0)
        }
    }

    /// Creates `path` exclusively with `contents`, mode 0644 (a lock's owner record is read by
    /// every process that may break it): O_EXCL|O_NOFOLLOW, so nothing already at `path` (a
    /// link, a FIFO, a file) is followed or written. Returns 0 or an errno value.
    static func createExclusive(_ path: String, contents: String) -> Int32 {
        var fd: Int32
        repeat {
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o644)
        } while fd < 0 && errno == EINTR
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        var text = contents
        return text.withUTF8 { bytes -> Int32 in
            var offset = 0
            while offset < bytes.count {
                let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += n
            }
            return 0
        }
    }

    /// The whole small file at `path`, nil if it cannot be read or is not a regular file (a FIFO
    /// or a symbolic link planted there is never opened for reading or followed).
    static func readSmallFile(_ path: String, limit: Int = 4096) -> String? {
        try? readRegularFile(path, limit: limit).get()
    }

    /// `readSmallFile`, saying why it could not read.
    static func readRegularFile(_ path: String, limit: Int = 4096) -> Result<String, FileRefusal> {
        let fd: Int32
        switch openRegular(path, O_RDONLY) {
        case .success(let opened): fd = opened
        case .failure(let refusal): return .failure(refusal)
        }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: limit)
        var total = 0
        while total < limit {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + total, limit - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            total += n
        }
        return .success(String(decoding: buffer[0..<total], as: UTF8.self))
    }

    /// link(2), rename(2), unlink(2): 0 or an errno value.
    static func link(_ from: String, _ to: String) -> Int32 { Glibc.link(from, to) == 0 ? 0 : errno }
    static func rename(_ from: String, _ to: String) -> Int32 { Glibc.rename(from, to) == 0 ? 0 : errno }
    static func unlink(_ path: String) -> Int32 { Glibc.unlink(path) == 0 ? 0 : errno }

    /// This boot's id (/proc/sys/kernel/random/boot_id): differs after every reboot.
    static let bootID = String((readSmallFile("/proc/sys/kernel/random/boot_id") ?? "").filter { !$0.isWhitespace })

    /// This process's PID namespace ("pid:[4026531836]"): pids name the same processes only
    /// within one namespace.
    static var pidNamespace: String {
        var buffer = [CChar](repeating: 0, count: 128)
        let n = readlink("/proc/self/ns/pid", &buffer, buffer.count - 1)
        guard n > 0 else { return "" }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// This host's name.
    static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Field 22 of /proc/PID/stat (start time in clock ticks since boot) and the state letter; nil
    /// when the process does not exist.
    static func processStart(_ pid: Int32) -> (start: UInt64, state: Character)? {
        guard let stat = readSmallFile("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: field 3 (state) is fields[0], field 22 (starttime) is fields[19].
        guard fields.count > 19, let state = fields[0].first, let start = UInt64(fields[19]) else { return nil }
        return (start, state)
    }
}
