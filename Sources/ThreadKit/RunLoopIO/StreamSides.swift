// StreamSides: what a TKInputStream reads from and a TKOutputStream writes to, behind two small
// protocols, and the always-ready sides: memory and regular files (docs/RunLoopIO.md, "Streams").
// Socket sides are in SocketChannel.swift, bound-pair sides in BoundPipe.swift.
//
// Threads: a side is called by its stream: `read`/`write` by one thread at a time, the rest from
// any thread; each side guards its own state. Sides call back into their stream (opened, post,
// reachedEnd, failed) with none of their locks held.
import Glibc

/// The outcome of one read or write on a side.
enum StreamTransfer {
    case bytes(Int)
    /// Input: nothing more will come.
    case end
    case failure(TKError)
}

protocol InputSide: AnyObject, Sendable {
    /// Starts opening; calls `stream.opened()` now or later, or `stream.failed(_:)`.
    func open(_ stream: TKInputStream)
    /// Reads at least one byte, waiting as NSStream does while nothing is there (never for
    /// memory and files), or reports the end or an error.
    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer
    /// Arms one `hasBytesAvailable` (or the end) for `stream`.
    func arm(_ stream: TKInputStream)
    var hasBytesAvailable: Bool { get }
    func close()
    func joined(_ loop: TKRunLoop)
    func left(_ loop: TKRunLoop)
}

protocol OutputSide: AnyObject, Sendable {
    func open(_ stream: TKOutputStream)
    /// Writes at least one byte, waiting while there is no space, or reports an error.
    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer
    /// Arms one `hasSpaceAvailable` for `stream`.
    func arm(_ stream: TKOutputStream)
    var hasSpaceAvailable: Bool { get }
    func close()
    func joined(_ loop: TKRunLoop)
    func left(_ loop: TKRunLoop)
}

extension InputSide {
    func joined(_ loop: TKRunLoop) {}
    func left(_ loop: TKRunLoop) {}
}

extension OutputSide {
    func joined(_ loop: TKRunLoop) {}
    func left(_ loop: TKRunLoop) {}
}

/// Bytes given at init, read front to back.
final class MemoryInput: InputSide, Sendable {
    private let state: Protected<(data: [UInt8], offset: Int)>

    init(_ data: [UInt8]) { state = Protected((data, 0)) }

    func open(_ stream: TKInputStream) { stream.opened() }

    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer {
        state.withLock { s in
            let n = min(length, s.data.count - s.offset)
            guard n > 0 else { return .end }
            s.data.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + s.offset, count: n) }
            s.offset += n
            return .bytes(n)
        }
    }

    /// Always ready: the event (or the end, once the last byte was read) is posted at once.
    func arm(_ stream: TKInputStream) {
        if hasBytesAvailable { stream.post(.hasBytesAvailable) } else { stream.reachedEnd() }
    }

    var hasBytesAvailable: Bool { state.withLock { $0.offset < $0.data.count } }

    func close() {}
}

/// A regular file read from its start, by offset (pread), so nothing else moves our position.
final class FileInput: InputSide, Sendable {
    private let fd: Int32
    private let offset = Protected<Int>(0)

    /// Takes ownership of `fd`.
    init(fd: Int32) { self.fd = fd }
    deinit { Glibc.close(fd) }

    func open(_ stream: TKInputStream) { stream.opened() }

    func read(_ buffer: UnsafeMutablePointer<UInt8>, _ length: Int) -> StreamTransfer {
        offset.withLock { offset in
            while true {
                let n = pread(fd, buffer, length, off_t(offset))
                if n > 0 {
                    offset += n
                    return .bytes(n)
                }
                if n == 0 { return .end }
                if errno == EINTR { continue }
                return .failure(TKError(.systemCall, "TKInputStream: reading the file failed", errno: errno))
            }
        }
    }

    func arm(_ stream: TKInputStream) {
        if hasBytesAvailable { stream.post(.hasBytesAvailable) } else { stream.reachedEnd() }
    }

    /// Whether the file extends past what was read (checked now: a growing file counts).
    var hasBytesAvailable: Bool {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return true } // let the read report the error
        return offset.withLock { Int(st.st_size) > $0 }
    }

    func close() {}
}

/// Bytes collected in memory (`dataWrittenToMemory`).
final class MemoryOutput: OutputSide, Sendable {
    let bytes = Protected<[UInt8]>([])

    func open(_ stream: TKOutputStream) { stream.opened() }

    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer {
        bytes.withLock { $0.append(contentsOf: UnsafeBufferPointer(start: buffer, count: length)) }
        return .bytes(length)
    }

    func arm(_ stream: TKOutputStream) { stream.post(.hasSpaceAvailable) }
    var hasSpaceAvailable: Bool { true }
    func close() {}
}

/// A regular file written at its end (append) or from its start (truncated at open).
final class FileOutput: OutputSide, Sendable {
    private let fd: Int32
    private let append: Bool

    /// Takes ownership of `fd`.
    init(fd: Int32, append: Bool) {
        self.fd = fd
        self.append = append
    }
    deinit { Glibc.close(fd) }

    func open(_ stream: TKOutputStream) {
        if !append && ftruncate(fd, 0) != 0 {
            stream.failed(TKError(.systemCall, "TKOutputStream: cannot truncate the file", errno: errno))
            return
        }
        stream.opened()
    }

    func write(_ buffer: UnsafePointer<UInt8>, _ length: Int) -> StreamTransfer {
        while true {
            let n = Glibc.write(fd, buffer, length)
            if n >= 0 { return .bytes(n) }
            if errno == EINTR { continue }
            return .failure(TKError(.systemCall, "TKOutputStream: writing the file failed", errno: errno))
        }
    }

    func arm(_ stream: TKOutputStream) { stream.post(.hasSpaceAvailable) }
    var hasSpaceAvailable: Bool { true }
    func close() {}
}
