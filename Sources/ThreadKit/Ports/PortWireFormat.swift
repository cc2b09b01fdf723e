// PortWireFormat: how TKSocketPort puts a TKPortMessage on a byte stream and takes it off again
// (docs/PortWireFormat.md is the reference). Pure functions and a per-connection decoder value,
// owned by the connection that feeds it.
//
//   frame     := length:u32 body                      length = byte count of body, ≤ 64 MiB
//   body      := "TKPM" version:u8(1) msgid:u32 reply:portref count:u32 component{count}
//   component := 0x00 length:u32 bytes{length}        (data)
//              | 0x01 portref                          (port)
//   portref   := 0x00                                  (none; only as reply)
//              | 0x01 port:u16 length:u16 host{length} (TCP)
//              | 0x02 length:u16 path{length}          (Unix socket)
// Integers are big-endian. A frame whose length is over the limit, whose body does not parse
// exactly to its end, or which a closed connection leaves unfinished, is refused.

/// Where a socket port listens: what a port component or a reply port carries across processes.
public enum TKSocketAddress: Hashable, Sendable, CustomStringConvertible {
    case tcp(host: String, port: UInt16)
    case unix(path: String)

    public var description: String {
        switch self {
        case .tcp(let host, let port): return "tcp \(host):\(port)"
        case .unix(let path): return "unix \(path)"
        }
    }
}

enum PortWireFormat {
    /// The largest body a frame may carry, either way: 64 MiB.
    static let maximumBodyLength = 64 << 20
    static let magic: [UInt8] = Array("TKPM".utf8)
    static let version: UInt8 = 1

    /// A message as it crosses the wire: ports are addresses.
    struct Frame: Equatable {
        enum Component: Equatable { case data([UInt8]), port(TKSocketAddress) }
        var msgid: UInt32
        var reply: TKSocketAddress?
        var components: [Component]
    }

    // MARK: Encoding

    /// The bytes of one frame, or why it cannot be sent.
    static func encode(_ frame: Frame) -> Result<[UInt8], FrameError> {
        var body: [UInt8] = []
        var capacity = 4 + 1 + 4 + 4 + 64
        for case .data(let bytes) in frame.components { capacity += 5 + bytes.count }
        guard capacity <= maximumBodyLength + 64 else { return .failure(.oversized(capacity)) }
        body.reserveCapacity(capacity + 4)
        body += [0, 0, 0, 0]   // the length, filled in below
        body += magic
        body.append(version)
        append32(frame.msgid, to: &body)
        if case .failure(let e) = appendReference(frame.reply, to: &body) { return .failure(e) }
        append32(UInt32(frame.components.count), to: &body)
        for component in frame.components {
            switch component {
            case .data(let bytes):
                body.append(0)
                append32(UInt32(bytes.count), to: &body)
                body += bytes
            case .port(let address):
                body.append(1)
                if case .failure(let e) = appendReference(address, to: &body) { return .failure(e) }
            }
        }
        let length = body.count - 4
        guard length <= maximumBodyLength else { return .failure(.oversized(length)) }
        for i in 0..<4 { body[i] = UInt8(truncatingIfNeeded: UInt32(length) >> (24 - 8 * i)) }
        return .success(body)
    }

    private static func append32(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes += [UInt8(truncatingIfNeeded: value >> 24), UInt8(truncatingIfNeeded: value >> 16),
                  UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
    }

    private static func append16(_ value: Int, to bytes: inout [UInt8]) {
        bytes += [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
    }

    private static func appendReference(_ address: TKSocketAddress?, to bytes: inout [UInt8]) -> Result<Void, FrameError> {
        switch address {
        case nil:
            bytes.append(0)
        case .tcp(let host, let port)?:
            let name = Array(host.utf8)
            guard name.count <= 255 else { return .failure(.malformed("a host name longer than 255 bytes")) }
            bytes.append(1)
            append16(Int(port), to: &bytes)
            append16(name.count, to: &bytes)
            bytes += name
        case .unix(let path)?:
            let name = Array(path.utf8)
            guard name.count <= 4096 else { return .failure(.malformed("a socket path longer than 4096 bytes")) }
            bytes.append(2)
            append16(name.count, to: &bytes)
            bytes += name
        }
        return .success(())
    }

    // MARK: Decoding

    enum FrameError: Error, Equatable, CustomStringConvertible {
        case oversized(Int)
        case malformed(String)
        case truncated(Int)

        var description: String {
            switch self {
            case .oversized(let n): return "oversized frame: \(n) bytes, over the limit of \(PortWireFormat.maximumBodyLength) (64 MiB)"
            case .malformed(let why): return "malformed frame: \(why)"
            case .truncated(let n): return "truncated frame: the connection closed with \(n) bytes of an unfinished frame"
            }
        }
    }

    /// Reassembles frames from the chunks a connection reads. One per connection.
    struct Decoder {
        private var buffer: [UInt8] = []
        private var start = 0

        /// Bytes received and not yet part of a complete frame.
        var pendingByteCount: Int { buffer.count - start }

        mutating func append(_ bytes: UnsafeRawBufferPointer) {
            if start > 0 && start >= buffer.count / 2 {
                buffer.removeSubrange(0..<start)
                start = 0
            }
            buffer.append(contentsOf: bytes)
        }

        /// The next complete frame, nil if more bytes are needed, or the reason to drop the connection.
        mutating func next() -> Result<Frame?, FrameError> {
            guard pendingByteCount >= 4 else { return .success(nil) }
            var length = 0
            for i in 0..<4 { length = length << 8 | Int(buffer[start + i]) }
            guard length <= PortWireFormat.maximumBodyLength else { return .failure(.oversized(length)) }
            guard pendingByteCount >= 4 + length else { return .success(nil) }
            let bodyStart = start + 4
            start = bodyStart + length
            return buffer.withUnsafeBytes { all in
                var reader = Reader(bytes: UnsafeRawBufferPointer(rebasing: all[bodyStart..<bodyStart + length]))
                return reader.frame().map { Optional($0) }
            }
        }
    }

    /// Reads one body, checking every length against what is left.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func frame() -> Result<Frame, FrameError> {
            do {
                guard try take(4).elementsEqual(PortWireFormat.magic) else { throw FrameError.malformed("bad magic (not a ThreadKit port frame)") }
                let version = try byte()
                guard version == PortWireFormat.version else { throw FrameError.malformed("unknown version \(version)") }
                let msgid = try u32()
                let reply = try reference()
                let count = Int(try u32())
                // Each component takes at least 2 bytes: a count beyond that is a lie.
                guard count <= (bytes.count - offset) / 2 else { throw FrameError.malformed("\(count) components in \(bytes.count - offset) bytes") }
                var components: [Frame.Component] = []
                components.reserveCapacity(count)
                for _ in 0..<count {
                    switch try byte() {
                    case 0: components.append(.data(Array(try take(Int(try u32())))))
                    case 1:
                        guard let address = try reference() else { throw FrameError.malformed("an empty port component") }
                        components.append(.port(address))
                    case let kind: throw FrameError.malformed("unknown component kind \(kind)")
                    }
                }
                guard offset == bytes.count else { throw FrameError.malformed("\(bytes.count - offset) bytes after the last component") }
                return .success(Frame(msgid: msgid, reply: reply, components: components))
            } catch let error as FrameError {
                return .failure(error)
            } catch {
                return .failure(.malformed("\(error)"))
            }
        }

        private mutating func take(_ n: Int) throws -> UnsafeRawBufferPointer {
            guard n >= 0, n <= bytes.count - offset else {
                throw FrameError.malformed("a field of \(n) bytes where \(bytes.count - offset) remain")
            }
            defer { offset += n }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + n])
        }

        private mutating func byte() throws -> UInt8 { try take(1)[0] }

        private mutating func u16() throws -> Int {
            let b = try take(2)
            return Int(b[0]) << 8 | Int(b[1])
        }

        private mutating func u32() throws -> UInt32 {
            let b = try take(4)
            return UInt32(b[0]) << 24 | UInt32(b[1]) << 16 | UInt32(b[2]) << 8 | UInt32(b[3])
        }

        private mutating func text() throws -> String {
            let raw = try take(try u16())
            guard let s = String(validating: raw, as: UTF8.self), !s.isEmpty, !s.utf8.contains(0) else {
                throw FrameError.malformed("an address that is not valid UTF-8 text")
            }
            return s
        }

        private mutating func reference() throws -> TKSocketAddress? {
            switch try byte() {
            case 0: return nil
            case 1:
                let port = UInt16(try u16())
                return .tcp(host: try text(), port: port)
            case 2: return .unix(path: try text())
            case let family: throw FrameError.malformed("unknown port family \(family)")
            }
        }
    }
}
