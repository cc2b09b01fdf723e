// TKDispatchIO: DispatchIO (dispatch_io_t): a channel on a descriptor or a path, stream or random
// access, that reads and writes in the background with high and low water marks and an interval,
// and closes (after its work, or at once with `.stop`) before a cleanup handler runs (docs/DispatchIO.md).
//
// Threads: every field marked "channel" is touched only on `channel`, a private serial queue on
// the pool: the public calls submit to it, and the descriptor's readiness sources deliver on it, so
// no lock guards them. Waiting for a pipe or socket goes through read/write sources on the
// manager's epoll set; regular files are read and written directly (always ready). `descriptor`
// mirrors the open descriptor for `fileDescriptor` (relaxed: a snapshot for any thread).
import CThreadKit
import Glibc
import Synchronization

// safety: the mutable fields are touched only on the channel's serial queue (`channel`); the
// rest is immutable or atomic (`descriptor`).
/// A channel that reads and writes a descriptor or a path in the background, like `DispatchIO`
/// (`dispatch_io_t`): stream or random access, results handed to a queue in parts bounded by
/// high and low water marks and an interval, and a cleanup handler that runs once the channel
/// has closed (after its pending work, or at once with `.stop`). Thread-safe: every call is
/// submitted to the channel's own serial queue.
public final class TKDispatchIO: @unchecked Sendable {
    /// DispatchIO.StreamType.
    public enum StreamType: Sendable {
        /// Reads and writes at the descriptor's position, in order, one after the other.
        case stream
        /// Reads and writes at offsets from the position the descriptor had when the channel opened it.
        case random
    }

    /// How `close(flags:)` closes the channel, as `DispatchIO.CloseFlags`.
    public struct CloseFlags: OptionSet, Sendable {
        /// The bits of the set: `stop` is 1.
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Stop the pending operations now: their handlers get ECANCELED.
        public static let stop = CloseFlags(rawValue: 1)
    }

    /// How `setInterval(interval:flags:)` delivers partial results, as `DispatchIO.IntervalFlags`.
    public struct IntervalFlags: OptionSet, Sendable {
        /// The bits of the set: `strictInterval` is 1.
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Deliver partial results only at the interval, not also when the low water mark is reached.
        public static let strictInterval = IntervalFlags(rawValue: 1)
    }

    /// `(done, data, error)`: read handlers get the bytes read since the last call (done: the
    /// operation ended, at its length, at end of file, or with `error`); write handlers get the
    /// bytes not yet written (nil when all were).
    public typealias IOHandler = @Sendable (_ done: Bool, _ data: TKDispatchData?, _ error: Int32) -> Void

    /// Bytes read per system call at most.
    static let chunkSize = 512 * 1024
    /// Chunks handled per turn on the channel queue before it yields to other work.
    static let chunksPerTurn = 16

    let type: StreamType
    let queue: TKDispatchQueue
    let channel: TKDispatchQueue
    let descriptor = Atomic<Int32>(-1)

    /// Where the descriptor comes from.
    enum Origin { case descriptor(Int32), path(String, Int32, mode_t) }
    let origin: Origin

    var fd: Int32 = -1 // channel
    var opened = false // channel: the open step ran
    var openError: Int32 = 0 // channel
    var isRegular = false // channel
    var isSocket = false // channel
    /// The descriptor's flags before the channel made it non-blocking (restored at cleanup).
    var originalFlags: Int32? // channel
    /// Random access: the position the offsets are relative to.
    var basePosition: off_t = 0 // channel
    var operations: [IOOperation] = [] // channel: FIFO of reads, writes, barriers
    var closed = false // channel
    var cleanedUp = false // channel
    var cleanupHandler: (@Sendable (Int32) -> Void)? // channel
    /// I/O handler calls submitted and not yet returned: the cleanup handler waits for them, as
    /// handlers and cleanup may go to a concurrent queue where submission order is not run order.
    let deliveries = TKDispatchGroup() // any thread (the group is thread-safe)
    var highWater = Int.max // channel
    var lowWater = TKDispatchIO.chunkSize // channel
    var interval: Duration? // channel
    var strictInterval = false // channel
    var tickScheduled = false // channel
    var readSource: TKDispatchSource? // channel
    var writeSource: TKDispatchSource? // channel
    /// The channel itself while operations are pending (a waiting read keeps its channel, as a
    /// libdispatch operation retains its channel); nil when none is.
    var keepAlive: TKDispatchIO? // channel
    /// A source waits for readiness (resumed), or sits suspended.
    var readWaiting = false, writeWaiting = false // channel

    // MARK: Creating

    /// A channel on `fileDescriptor` (dispatch_io_create). The channel controls the descriptor
    /// until the cleanup handler runs on `queue` (with 0, or the errno that made the descriptor
    /// unusable); close it only after that. A descriptor that is not open fails every operation
    /// with EBADF.
    public init(
        type: StreamType, fileDescriptor: Int32, queue: TKDispatchQueue,
        cleanupHandler: @escaping @Sendable (_ error: Int32) -> Void
    ) {
        self.type = type
        self.queue = queue
        origin = .descriptor(fileDescriptor)
        channel = TKDispatchQueue(label: "tk.io.fd\(fileDescriptor)", qos: queue.qos)
        self.cleanupHandler = cleanupHandler
    }

    /// A channel on the file at `path` (dispatch_io_create_with_path), opened with `oflag` and
    /// `mode` before the first operation; the channel closes it. A path that is not absolute
    /// throws `TKError` (`.invalidArgument`); an open that fails fails every operation with its
    /// errno and passes it to the cleanup handler.
    public init(
        type: StreamType, path: String, oflag: Int32, mode: mode_t, queue: TKDispatchQueue,
        cleanupHandler: @escaping @Sendable (_ error: Int32) -> Void
    ) throws {
        guard path.hasPrefix("/") else {
            throw TKError(
                .invalidArgument,
                "TKDispatchIO(path: \"\(path)\"): the path is not absolute. "
                    + "Fix: pass an absolute path (the channel opens it later, from another thread).")
        }
        self.type = type
        self.queue = queue
        origin = .path(path, oflag, mode)
        channel = TKDispatchQueue(label: "tk.io.path", qos: queue.qos)
        self.cleanupHandler = cleanupHandler
    }

    deinit {
        // Dropped without close: nothing is pending (every operation holds the channel).
        if !cleanedUp { releaseDescriptor() }
    }

    /// The descriptor the channel uses (dispatch_io_get_descriptor); -1 before it is opened and
    /// after cleanup.
    public var fileDescriptor: Int32 { descriptor.load(ordering: .relaxed) }

    // MARK: Parameters

    /// Partial results are delivered in pieces of at most `highWater` bytes (default: unlimited).
    public func setLimit(highWater: Int) {
        channel.async { [self] in self.highWater = max(1, highWater) }
    }

    /// Partial results are delivered once at least `lowWater` bytes are read (default 512 KiB);
    /// `Int.max`: only at the end.
    public func setLimit(lowWater: Int) {
        channel.async { [self] in self.lowWater = max(1, lowWater) }
    }

    /// Partial results are also delivered every `interval` while an operation runs (with
    /// `.strictInterval`: only then, not at the low water mark).
    public func setInterval(interval: Duration, flags: IntervalFlags = []) {
        channel.async { [self] in
            self.interval = interval > .zero ? interval : nil
            strictInterval = flags.contains(.strictInterval)
            scheduleTick()
        }
    }

    // MARK: Operations

    /// Reads `length` bytes (`Int.max`: to the end of file) at `offset` (random access; ignored
    /// for streams), calling `ioHandler` on `queue` with what arrives. A random-access offset
    /// that, added to the channel's base position, falls outside the file's range (negative, or
    /// past Int64.max) ends the read with EINVAL, as in libdispatch.
    public func read(offset: off_t, length: Int, queue: TKDispatchQueue, ioHandler: @escaping IOHandler) {
        submit(IOOperation(.read(length: max(0, length)), offset: offset, queue: queue, handler: ioHandler))
    }

    /// Writes `data` at `offset` (random access; ignored for streams), calling `ioHandler` on
    /// `queue` at the end (and at the interval) with the bytes not yet written. A random-access
    /// offset outside the file's range (see `read`) ends the write with EINVAL and every byte
    /// handed back.
    public func write(offset: off_t, data: TKDispatchData, queue: TKDispatchQueue, ioHandler: @escaping IOHandler) {
        let operation = IOOperation(.write, offset: offset, queue: queue, handler: ioHandler)
        operation.data = data
        submit(operation)
    }

    /// Runs `barrier` once every operation submitted before it has ended and before any submitted
    /// after it starts (it may use the descriptor: fsync, lseek, ftruncate).
    public func barrier(execute barrier: @escaping @Sendable () -> Void) {
        submit(IOOperation(.barrier(barrier), offset: 0, queue: channel, handler: nil))
    }

    /// Closes the channel: no operation is accepted after this (their handlers get ECANCELED);
    /// those pending finish first, or at once with ECANCELED given `.stop`. The cleanup handler
    /// then runs on the channel's queue.
    public func close(flags: CloseFlags = []) {
        channel.async { [self] in
            closed = true
            if flags.contains(.stop) {
                let stopped = operations
                operations = []
                for operation in stopped { finish(operation, error: ECANCELED, remove: false) }
            }
            pump()
        }
    }

    private func submit(_ operation: IOOperation) {
        channel.async { [self] in
            if closed {
                finish(operation, error: ECANCELED, remove: false)
                return
            }
            operations.append(operation)
            pump()
        }
    }
}
