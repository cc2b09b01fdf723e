// Console: unbuffered writes to standard output and error, so that lines written by several
// threads and processes appear in the order they were written. Any thread. Shared by the tour
// (threadkit, threadkit-postgres) and the test children (ThreadKitTestChild,
// ThreadKitPostgresTestChild).
import Glibc

package enum Console {
    package static func out(_ line: String) { write(1, line + "\n") }
    package static func err(_ line: String) { write(2, line + "\n") }

    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }

    package static func padded(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
    }
}
