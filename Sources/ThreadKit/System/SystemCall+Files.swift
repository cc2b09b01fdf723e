// SystemCall+Files: the file-system calls of TKDistributedLock, each retrying EINTR and reporting
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
    }

    /// stat(2); nil with `errno` set when it fails.
    static func status(_ path: String) -> FileStatus? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return FileStatus(identity: FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)),
                          modified: st.st_mtim, isDirectory: (st.st_mode & S_IFMT) == S_IFDIR)
    }

    /// Creates `path` exclusively (O_EXCL) with `contents`. Returns 0 or an errno value.
    static func createExclusive(_ path: String, contents: String) -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
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

    /// The whole small file at `path`, nil if it cannot be read.
    static func readSmallFile(_ path: String, limit: Int = 4096) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: limit)
        var total = 0
        while total < limit {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + total, limit - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            total += n
        }
        return String(decoding: buffer[0..<total], as: UTF8.self)
    }

    /// link(2), rename(2), unlink(2): 0 or an errno value.
    static func link(_ from: String, _ to: String) -> Int32 { Glibc.link(from, to) == 0 ? 0 : errno }
    static func rename(_ from: String, _ to: String) -> Int32 { Glibc.rename(from, to) == 0 ? 0 : errno }
    static func unlink(_ path: String) -> Int32 { Glibc.unlink(path) == 0 ? 0 : errno }

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
