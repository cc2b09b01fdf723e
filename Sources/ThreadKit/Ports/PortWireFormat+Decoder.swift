// PortWireFormat+Decoder: taking frames off a byte stream. One `Decoder` per accepted connection,
// owned by that connection (TKSocketPort's `listener` lock guards it); `Reader` parses one body.
//
// What the decoder holds is bounded three ways (docs/Ports.md, "What a peer can cost"):
//   - a frame announcing more than 64 MiB is refused from its length, before its body is read;
//   - a frame's first bytes (envelope, magic, version, reply, component count) are checked as soon
//     as they arrive, so a frame announcing too many components, or a frame without authentication
//     sent to a port that requires it, is refused before the rest is buffered;
//   - the buffer grows by doubling but never past the end of the frame it assembles, reports what
//     it holds (`heldByteCount`, charged to the process's budget by TKSocketPort) and what it could
//     hold after the next append (reserved first), and is freed once drained if a big frame grew it.

extension PortWireFormat {
    enum FrameError: Error, Equatable, CustomStringConvertible {
        case oversized(Int)
        case malformed(String)
        case truncated(Int)
        /// Over the components or port references a message may carry.
        case overLimit(String)
        /// Not authenticated, or authentication data that does not verify.
        case unauthenticated(String)

        var description: String {
            switch self {
            case .oversized(let n): return "oversized frame: \(n) bytes, over the limit of \(PortWireFormat.maximumBodyLength) (64 MiB)"
            case .malformed(let why): return "malformed frame: \(why)"
            case .truncated(let n): return "truncated frame: the connection closed with \(n) bytes of an unfinished frame"
            case .overLimit(let why): return "frame over a limit: \(why)"
            case .unauthenticated(let why): return "unauthenticated frame refused before decoding: \(why)"
            }
        }
    }

    /// Reassembles frames from the chunks a connection reads. One per connection.
    struct Decoder {
        /// A drained buffer up to this capacity is kept for the next frames; a bigger one is freed.
        static let keptCapacity = 64 << 10

        /// Received bytes; those before `start` belong to frames already decoded.
        private var buffer: [UInt8] = []
        private var start = 0
        /// The first bytes of the frame at `start` passed `inspectHead` (reset at each frame).
        private var headChecked = false

        /// Bytes received and not yet part of a complete frame.
        var pendingByteCount: Int { buffer.count - start }

        /// Memory held for unfinished frames: the buffer's capacity while part of a frame waits.
        var heldByteCount: Int { pendingByteCount > 0 ? buffer.capacity : 0 }

        /// The buffer's capacity, held or kept (for tests: a drained decoder gives big buffers back).
        var bufferCapacity: Int { buffer.capacity }

        /// The most `heldByteCount` can be after appending `count` bytes: what to reserve first.
        func heldByteCount(appending count: Int) -> Int {
            guard count > 0 else { return heldByteCount }
            return max(buffer.capacity, capacity(for: pendingByteCount + count))
        }

        /// The capacity given for `needed` bytes: doubling, but not past the end of the frame
        /// being assembled when its length is known and the bytes fit in it.
        private func capacity(for needed: Int) -> Int {
            guard needed > buffer.capacity else { return buffer.capacity }
            var target = max(needed, buffer.capacity * 2)
            if pendingByteCount >= 4 {
                let end = 4 + length(at: start)
                if needed <= end { target = min(target, end) }
            }
            return target
        }

        private func length(at offset: Int) -> Int {
            var length = 0
            for i in 0..<4 { length = length << 8 | Int(buffer[offset + i]) }
            return length
        }

        mutating func append(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count > 0 else { return }
            if start > 0 {
                // What follows the decoded frames: at most the tail of one read.
                buffer.removeSubrange(0..<start)
                start = 0
            }
            let needed = buffer.count + bytes.count
            if needed > buffer.capacity { buffer.reserveCapacity(capacity(for: needed)) }
            buffer.append(contentsOf: bytes)
        }

        /// The next complete frame, nil if more bytes are needed, or the reason to drop the
        /// connection. With a `verifier`, a frame must come in an envelope whose authentication
        /// data it accepts; that is checked before the body is decoded.
        mutating func next(verifier: Verifier? = nil) -> Result<Frame?, FrameError> {
            guard pendingByteCount >= 4 else { return .success(nil) }
            let length = length(at: start)
            guard length <= PortWireFormat.maximumBodyLength else { return .failure(.oversized(length)) }
            let bodyStart = start + 4
            guard pendingByteCount >= 4 + length else {
                if !headChecked {
                    let head = buffer.withUnsafeBytes { all in
                        PortWireFormat.inspectHead(UnsafeRawBufferPointer(rebasing: all[bodyStart...]), authenticated: verifier != nil)
                    }
                    switch head {
                    case .needMore: break
                    case .fine: headChecked = true
                    case .refused(let error): return .failure(error)
                    }
                }
                return .success(nil)
            }
            start = bodyStart + length
            headChecked = false
            let result = buffer.withUnsafeBytes { all in
                PortWireFormat.decodeFrame(UnsafeRawBufferPointer(rebasing: all[bodyStart..<bodyStart + length]), verifier: verifier)
            }
            if start == buffer.count {
                // Drained: a buffer a big frame grew is given back.
                if buffer.capacity > Decoder.keptCapacity { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
                start = 0
            }
            return result.map { Optional($0) }
        }
    }

    enum HeadCheck: Equatable { case needMore, fine, refused(FrameError) }

    /// Checks the first bytes of a frame after its length (as many as have arrived).
    static func inspectHead(_ prefix: UnsafeRawBufferPointer, authenticated: Bool) -> HeadCheck {
        var reader = Reader(bytes: prefix, partial: true)
        do {
            if try reader.peekEnvelope() {
                _ = try reader.take(4)
            } else if authenticated {
                return .refused(.unauthenticated("it carries no authentication data, and this port requires it"))
            }
            _ = try reader.head()
            return .fine
        } catch let error as FrameError {
            return .refused(error)
        } catch {
            return .needMore
        }
    }

    /// Decodes one complete frame (the bytes after its length). An envelope's authentication data
    /// is verified before its body is decoded.
    static func decodeFrame(_ bytes: UnsafeRawBufferPointer, verifier: Verifier?) -> Result<Frame, FrameError> {
        var body = bytes
        if bytes.count >= 4 && bytes[0..<4].elementsEqual(envelopeMagic) {
            guard bytes.count >= 4 + 2 else { return .failure(.malformed("an envelope without authentication data")) }
            let n = Int(bytes[bytes.count - 2]) << 8 | Int(bytes[bytes.count - 1])
            guard n <= maximumAuthenticationLength, 4 + n + 2 <= bytes.count else {
                return .failure(.malformed("\(n) bytes of authentication data in an envelope of \(bytes.count) bytes"))
            }
            body = UnsafeRawBufferPointer(rebasing: bytes[4..<bytes.count - 2 - n])
            let auth = UnsafeRawBufferPointer(rebasing: bytes[bytes.count - 2 - n..<bytes.count - 2])
            if let verifier, !verifier(body, auth) {
                return .failure(.unauthenticated("its authentication data does not match (another key, or an altered frame)"))
            }
        } else if verifier != nil {
            return .failure(.unauthenticated("it carries no authentication data, and this port requires it"))
        }
        var reader = Reader(bytes: body, partial: false)
        return reader.frame()
    }

    /// Reads one body, checking every length against what is left. A `partial` reader looks at
    /// the first bytes of a frame still arriving: running out of bytes throws `NeedMore`.
    struct Reader {
        struct NeedMore: Error {}

        let bytes: UnsafeRawBufferPointer
        let partial: Bool
        var offset = 0

        init(bytes: UnsafeRawBufferPointer, partial: Bool) {
            self.bytes = bytes
            self.partial = partial
        }

        mutating func frame() -> Result<Frame, FrameError> {
            do {
                let (msgid, reply, count) = try head()
                // Each component takes at least 2 bytes: a count beyond that is a lie.
                guard count <= (bytes.count - offset) / 2 else { throw FrameError.malformed("\(count) components in \(bytes.count - offset) bytes") }
                var references = reply == nil ? 0 : 1
                var components: [Frame.Component] = []
                components.reserveCapacity(count)
                for _ in 0..<count {
                    switch try byte() {
                    case 0: components.append(.data(Array(try take(Int(try u32())))))
                    case 1:
                        guard let address = try reference() else { throw FrameError.malformed("an empty port component") }
                        references += 1
                        guard references <= PortWireFormat.maximumPortReferences else {
                            throw FrameError.overLimit("more than \(PortWireFormat.maximumPortReferences) port references in one message")
                        }
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

        /// Whether the bytes start with an envelope's magic.
        func peekEnvelope() throws -> Bool {
            guard bytes.count - offset >= 4 else { throw NeedMore() }
            return bytes[offset..<offset + 4].elementsEqual(PortWireFormat.envelopeMagic)
        }

        /// Magic, version, msgid, reply port and the component count (checked against the limit).
        mutating func head() throws -> (msgid: UInt32, reply: TKSocketAddress?, count: Int) {
            guard try take(4).elementsEqual(PortWireFormat.magic) else { throw FrameError.malformed("bad magic (not a ThreadKit port frame)") }
            let version = try byte()
            guard version == PortWireFormat.version else { throw FrameError.malformed("unknown version \(version)") }
            let msgid = try u32()
            let reply = try reference()
            let count = Int(try u32())
            guard count <= PortWireFormat.maximumComponents else {
                throw FrameError.overLimit("\(count) components, over the limit of \(PortWireFormat.maximumComponents) per message")
            }
            return (msgid, reply, count)
        }

        mutating func take(_ n: Int) throws -> UnsafeRawBufferPointer {
            guard n >= 0, n <= bytes.count - offset else {
                if partial && n >= 0 { throw NeedMore() }
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
