// TKOutputStream: NSOutputStream to memory, a file, a socket or a bound pair's writing end
// (docs/RunLoopIO.md, "Streams"). Threads: see TKStream; `write` by one thread at a time.
import Glibc

// safety: adds only an immutable side (each side locks itself) to TKStream.
/// A stream to write bytes to (NSOutputStream).
public final class TKOutputStream: TKStream, @unchecked Sendable {
    let side: any OutputSide

    init(side: any OutputSide) {
        self.side = side
        super.init()
    }

    /// Collects what is written in memory: see `dataWrittenToMemory`.
    public convenience init(toMemory: ()) {
        self.init(side: MemoryOutput())
    }

    /// Writes the file at `path` (created if missing), after its end with `shouldAppend`, else
    /// from its start (truncated by `open()`); nil if it cannot be opened for writing.
    public convenience init?(toFileAtPath path: String, append shouldAppend: Bool) {
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (shouldAppend ? O_APPEND : 0), 0o644)
        guard fd >= 0 else { return nil }
        self.init(side: FileOutput(fd: fd, append: shouldAppend))
    }

    deinit { side.close() }

    /// Writes up to `len` bytes: the count written (> 0; a short count when the peer or the
    /// buffer takes less), -1 on an error (see `streamError`) or when the stream is not open.
    /// With no space at all, waits for some, as NSOutputStream does; on a scheduled stream write
    /// on `hasSpaceAvailable`, which guarantees no wait. Each write arms the next
    /// `hasSpaceAvailable`.
    public func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        switch streamStatus {
        case .notOpen, .closed, .error, .atEnd: return -1
        case .opening, .open, .reading, .writing: break
        }
        guard len > 0 else { return 0 }
        switch side.write(buffer, len) {
        case .bytes(let n):
            side.arm(self)
            return n
        case .end:
            return 0
        case .failure(let error):
            failed(error)
            return -1
        }
    }

    /// Whether a write would take bytes at once.
    public var hasSpaceAvailable: Bool {
        switch streamStatus {
        case .open, .reading, .writing: return side.hasSpaceAvailable
        default: return false
        }
    }

    /// What was written, for a stream made with `init(toMemory:)`; nil for other streams.
    public var dataWrittenToMemory: [UInt8]? {
        (side as? MemoryOutput)?.bytes.current
    }

    override func openSide() { side.open(self) }
    override func closeSide() { side.close() }
    override func armSide() { side.arm(self) }
    override func sideJoined(_ loop: TKRunLoop) { side.joined(loop) }
    override func sideLeft(_ loop: TKRunLoop) { side.left(loop) }
}
