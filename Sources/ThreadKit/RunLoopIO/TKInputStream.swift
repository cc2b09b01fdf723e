// TKInputStream: NSInputStream over memory, a file, a socket or a bound pair's reading end
// (docs/RunLoopIO.md, "Streams"). Threads: see TKStream; `read` by one thread at a time.
import Glibc

// safety: adds only an immutable side (each side locks itself) to TKStream.
/// A stream to read bytes from (NSInputStream).
public final class TKInputStream: TKStream, @unchecked Sendable {
    let side: any InputSide

    init(side: any InputSide) {
        self.side = side
        super.init()
    }

    /// Reads `data`, then ends.
    public convenience init(data: [UInt8]) {
        self.init(side: MemoryInput(data))
    }

    /// Reads the file at `path`; nil if it cannot be opened for reading.
    public convenience init?(fileAtPath path: String) {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        self.init(side: FileInput(fd: fd))
    }

    deinit { side.close() }

    /// Reads up to `len` bytes: the count read (> 0), 0 at the end, -1 on an error (see
    /// `streamError`) or when the stream is not open. With nothing there yet, waits for at least
    /// one byte, as NSInputStream does; on a scheduled stream read on `hasBytesAvailable`, which
    /// guarantees no wait. Each read arms the next `hasBytesAvailable`.
    public func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        switch streamStatus {
        case .notOpen, .closed, .error: return -1
        case .atEnd: return 0
        case .opening, .open, .reading, .writing: break
        }
        guard len > 0 else { return 0 }
        switch side.read(buffer, len) {
        case .bytes(let n):
            side.arm(self)
            return n
        case .end:
            reachedEnd()
            return 0
        case .failure(let error):
            failed(error)
            return -1
        }
    }

    /// Whether a read would return at once with bytes (or the end).
    public var hasBytesAvailable: Bool {
        switch streamStatus {
        case .open, .reading, .writing: return side.hasBytesAvailable
        default: return false
        }
    }

    override func openSide() { side.open(self) }
    override func closeSide() { side.close() }
    override func armSide() { side.arm(self) }
    override func sideJoined(_ loop: TKRunLoop) { side.joined(loop) }
    override func sideLeft(_ loop: TKRunLoop) { side.left(loop) }
}
