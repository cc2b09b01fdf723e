// StandardError: the one line ThreadKitMetrics says on standard error when a limit first bites (an
// endpoint at its connection cap, an exporter past its series limit). One write(2) per line, so
// lines from several threads do not interleave. Any thread.
import Glibc

enum StandardError {
    /// Writes `text` and a newline to standard error.
    static func line(_ text: String) {
        var text = text + "\n"
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                offset += n
            }
        }
    }
}
