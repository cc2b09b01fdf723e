// AppendLog: a file that several child processes append lines to, which the scenario or test that
// started them then reads as its judge. One write(2) per line on an O_APPEND descriptor, so the
// lines of several processes never interleave. Any thread may append (each line is one system
// call); the descriptor is closed when the last reference goes.
import Glibc

package final class AppendLog: Sendable {
    private let fd: Int32

    /// Opens `path` for appending, creating it (mode 0644); nil when it cannot be opened.
    package init?(path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard fd >= 0 else { return nil }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Appends `line` and a newline in one write(2).
    package func append(_ line: String) {
        var text = line + "\n"
        text.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
    }
}
