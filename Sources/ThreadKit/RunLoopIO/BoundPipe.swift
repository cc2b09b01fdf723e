// BoundPipe: the in-process byte ring shared by the two ends of a bound stream pair
// (TKStream.getBoundStreams, docs/RunLoopIO.md "Streams"). A write copies what fits and tells the
// reader; a read frees space and tells the writer. Unscheduled ends wait on `changed` (a futex
// condition), never spinning.
//
// Threads: any. `mutex` guards every field below it; streams are called back after it is released.
import Glibc

// safety: the ring and its flags are touched only under `mutex`; `capacity` is immutable.
final class BoundPipe: @unchecked Sendable {
    private let mutex = RawMutex()
    private let changed = RawCondition()
    /// The most bytes the pair may hold (the size asked for, at least 1). Immutable.
    private let capacity: Int
    /// The bytes, grown on demand up to `capacity` (a pair made with a huge size costs nothing
    /// until it holds that much).
    private var ring: [UInt8]
    private var head = 0
    private var count = 0
    private var readerClosed = false
    private var writerClosed = false
    /// One-shot arms: the reader waits for bytes (or the end), the writer for space.
    private var readerWants = false
    private var writerWants = false
    private weak var reader: TKInputStream?
    private weak var writer: TKOutputStream?

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        ring = [UInt8](repeating: 0, count: min(self.capacity, 4096))
    }

    func attach(reader: TKInputStream, writer: TKOutputStream) {
        mutex.withLock {
            self.reader = reader
            self.writer = writer
        }
    }

    private enum Notice { case none, readerReady, writerReady }

    private func tell(_ notice: Notice) {
        switch notice {
        case .none: break
        case .readerReady: if let reader = mutex.withLock({ reader }) { armRead(reader) }
        case .writerReady: if let writer = mutex.withLock({ writer }) { writer.post(.hasSpaceAvailable) }
        }
    }

    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer {
        let tid = mutex.lockInternal()
        while count == 0 && !writerClosed && !readerClosed { _ = changed.wait(mutex, tid, deadline: nil) }
        guard count > 0 else {
            mutex.unlockInternal(tid)
            return .end
        }
        let n = min(length, count)
        for i in 0..<n { buffer[i] = ring[(head + i) % ring.count] }
        head = (head + n) % ring.count
        count -= n
        var notice = Notice.none
        if writerWants {
            writerWants = false
            notice = .writerReady
        }
        changed.broadcast()
        mutex.unlockInternal(tid)
        tell(notice)
        return .bytes(n)
    }

    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer {
        let tid = mutex.lockInternal()
        while count == capacity && !readerClosed && !writerClosed { _ = changed.wait(mutex, tid, deadline: nil) }
        guard !readerClosed else {
            mutex.unlockInternal(tid)
            return .failure(TKError(.systemCall, "TKOutputStream of a bound pair: the input stream was closed", errno: EPIPE))
        }
        let n = min(length, capacity - count)
        if count + n > ring.count { grow(toHold: count + n) }
        let tail = head + count
        for i in 0..<n { ring[(tail + i) % ring.count] = buffer[i] }
        count += n
        var notice = Notice.none
        if readerWants {
            readerWants = false
            notice = .readerReady
        }
        changed.broadcast()
        mutex.unlockInternal(tid)
        tell(notice)
        return .bytes(n)
    }

    /// One `hasBytesAvailable` (or the end, once the writer closed and the ring is empty).
    func armRead(_ stream: TKInputStream) {
        enum Now { case bytes, end, later }
        let now = mutex.withLock { () -> Now in
            if count > 0 { return .bytes }
            if writerClosed { return .end }
            readerWants = true
            return .later
        }
        switch now {
        case .bytes: stream.post(.hasBytesAvailable)
        case .end: stream.reachedEnd()
        case .later: break
        }
    }

    /// One `hasSpaceAvailable` (also when the reader closed: the write then reports it).
    func armWrite(_ stream: TKOutputStream) {
        let now = mutex.withLock { () -> Bool in
            if count < capacity || readerClosed { return true }
            writerWants = true
            return false
        }
        if now { stream.post(.hasSpaceAvailable) }
    }

    var hasBytesAvailable: Bool { mutex.withLock { count > 0 || writerClosed } }
    var hasSpaceAvailable: Bool { mutex.withLock { count < capacity || readerClosed } }

    /// Enlarges the ring (doubling, at most to `capacity`) to hold `needed` bytes, the held ones
    /// moved to its start. Caller holds `mutex`.
    private func grow(toHold needed: Int) {
        let doubled = ring.count > capacity / 2 ? capacity : ring.count * 2
        var larger = [UInt8](repeating: 0, count: max(needed, doubled))
        for i in 0..<count { larger[i] = ring[(head + i) % ring.count] }
        ring = larger
        head = 0
    }

    func closeReader() {
        let notice = mutex.withLock { () -> Notice in
            readerClosed = true
            changed.broadcast()
            defer { writerWants = false }
            return writerWants ? .writerReady : .none
        }
        tell(notice)
    }

    func closeWriter() {
        let notice = mutex.withLock { () -> Notice in
            writerClosed = true
            changed.broadcast()
            defer { readerWants = false }
            return readerWants ? .readerReady : .none
        }
        tell(notice)
    }
}

/// The ends of a bound pair.
final class PipeInput: InputSide, Sendable {
    let pipe: BoundPipe
    init(_ pipe: BoundPipe) { self.pipe = pipe }
    func open(_ stream: TKInputStream) { stream.opened() }
    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer { pipe.read(buffer, length) }
    func arm(_ stream: TKInputStream) { pipe.armRead(stream) }
    var hasBytesAvailable: Bool { pipe.hasBytesAvailable }
    func close() { pipe.closeReader() }
}

final class PipeOutput: OutputSide, Sendable {
    let pipe: BoundPipe
    init(_ pipe: BoundPipe) { self.pipe = pipe }
    func open(_ stream: TKOutputStream) { stream.opened() }
    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer { pipe.write(buffer, length) }
    func arm(_ stream: TKOutputStream) { pipe.armWrite(stream) }
    var hasSpaceAvailable: Bool { pipe.hasSpaceAvailable }
    func close() { pipe.closeWriter() }
}

extension TKStream {
    /// A TCP connection to `hostname`:`port`, made when either stream is opened: the name is
    /// resolved off the calling thread, each address tried in turn without blocking, and
    /// `openCompleted` follows the connect. Failures arrive as `errorOccurred` (`streamError`).
    public static func getStreamsToHost(withName hostname: String, port: Int)
        -> (inputStream: TKInputStream, outputStream: TKOutputStream)
    {
        let channel: SocketChannel
        if let valid = UInt16(exactly: port), valid != 0 {
            channel = SocketChannel(host: hostname, port: valid)
        } else {
            channel = SocketChannel(
                failed: TKError(
                    .invalidArgument,
                    "TKStream.getStreamsToHost(withName: \"\(hostname)\", port: \(port)): "
                        + "the port must be 1…65535. Fix: pass the server's port."))
        }
        return pair(channel)
    }

    /// Streams over a connected socket, which they own from now on (closed with the second of
    /// them). The socket is made non-blocking and close-on-exec.
    public static func getStreams(forConnectedSocket fd: Int32) -> (inputStream: TKInputStream, outputStream: TKOutputStream) {
        pair(SocketChannel(connected: fd))
    }

    /// Two streams joined in this process through a buffer of `bufferSize` bytes (at least 1):
    /// what is written to the output can be read from the input. Either end may be scheduled on
    /// any loop, or used blocking.
    public static func getBoundStreams(withBufferSize bufferSize: Int) -> (inputStream: TKInputStream, outputStream: TKOutputStream) {
        let pipe = BoundPipe(capacity: bufferSize)
        let input = TKInputStream(side: PipeInput(pipe))
        let output = TKOutputStream(side: PipeOutput(pipe))
        pipe.attach(reader: input, writer: output)
        return (input, output)
    }

    private static func pair(_ channel: SocketChannel) -> (inputStream: TKInputStream, outputStream: TKOutputStream) {
        let input = TKInputStream(side: SocketInput(channel))
        let output = TKOutputStream(side: SocketOutput(channel))
        channel.attach(input: input, output: output)
        return (input, output)
    }
}
