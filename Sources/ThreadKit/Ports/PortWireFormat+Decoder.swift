// PortWireFormat+Decoder: taking frames off a byte stream. One `Decoder` per accepted connection,
// owned by that connection (TKSocketPort's `listener` lock guards it); `Reader` parses one body.
//
// What the decoder holds is bounded (docs/Ports.md, "What a peer can cost"):
//   - a frame announcing more than 64 MiB is refused from its length, before its body is read;
//   - a frame's first bytes (magic, version, reply, component count; a segment's length) are
//     checked as soon as they arrive, so a frame announcing too many components, or a frame
//     without authentication sent to a port that requires it, is refused before the rest is
//     buffered;
//   - with a verifier, a connection not assembling a message may send nothing longer than a
//     first segment (2,071 bytes): the length is refused before the bytes are kept. Each segment
//     is verified once it is complete, and only verified data joins the message being assembled
//     (`assembly`), whose whole size is asked of `admit` first. So an unauthenticated peer makes
//     the decoder hold one read at most, and only what a key holder signed is assembled;
//   - the raw buffer grows by doubling but never past the end of the frame it assembles (nor
//     past `rawWorkspace` while that suffices), reports what it holds (`heldByteCount`, charged
//     to the process's budget by TKSocketPort) and what it could hold after the next append
//     (reserved first), and is freed once drained if a big frame grew it.

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
        /// What the raw buffer may grow to while segments arrive: a partial segment plus one read
        /// (64 KiB), rounded up. Part of what an admitted segmented message keeps charged, so a
        /// message once admitted never needs more of the budget before it completes.
        static let rawWorkspace = 256 << 10

        /// Received bytes; those before `start` belong to frames already decoded.
        private var buffer: [UInt8] = []
        private var start = 0
        /// The first bytes of the frame at `start` passed `inspectHead` (reset at each frame).
        private var headChecked = false

        /// The segmented message being assembled, and its verified body bytes so far.
        private struct Assembling {
            let message: UInt64
            let total: Int
            var next: UInt32
            var headChecked = false
        }
        private var assembling: Assembling?
        private var assembly: [UInt8] = []

        /// What `admit` was asked for when `next` last stopped at a message's first segment
        /// without taking it (the segment stays buffered; call `next` again to retry); nil when
        /// the last `next` did not stop there.
        private(set) var waitingForAdmission: Int?

        /// Raw bytes received and not yet part of a complete frame.
        var pendingByteCount: Int { buffer.count - start }

        /// Bytes of messages not yet complete: raw and assembled. A connection that closes with
        /// any leaves a truncated message.
        var unfinishedByteCount: Int { pendingByteCount + assembly.count }

        /// Whether a segmented message has been admitted and is being assembled.
        var isAssembling: Bool { assembling != nil }

        /// Memory held for unfinished frames: the raw buffer's capacity while part of a frame
        /// waits, and the assembly's.
        var heldByteCount: Int { (pendingByteCount > 0 ? buffer.capacity : 0) + assembly.capacity }

        /// What the connection keeps charged whatever it holds at the moment: while a message is
        /// assembled, its assembly and the raw workspace, so that it never waits for the budget.
        var chargeFloor: Int { assembling == nil ? 0 : assembly.capacity + Decoder.rawWorkspace }

        /// The raw buffer's capacity, held or kept (for tests: a drained decoder gives big buffers back).
        var bufferCapacity: Int { buffer.capacity }

        /// The most `heldByteCount` can be after appending `count` bytes: what to reserve first.
        func heldByteCount(appending count: Int) -> Int {
            guard count > 0 else { return heldByteCount }
            return max(buffer.capacity, capacity(for: pendingByteCount + count)) + assembly.capacity
        }

        /// The capacity given for `needed` bytes: doubling, but not past the end of the frame
        /// being assembled when its length is known and the bytes fit in it, nor past the raw
        /// workspace when they fit in that.
        private func capacity(for needed: Int) -> Int {
            guard needed > buffer.capacity else { return buffer.capacity }
            var target = max(needed, buffer.capacity * 2)
            if pendingByteCount >= 4 {
                let end = 4 + length(at: start)
                if needed <= end { target = min(target, end) }
            }
            if needed <= Decoder.rawWorkspace { target = min(target, Decoder.rawWorkspace) }
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

        /// The next complete message, nil if more bytes are needed (or `admit` refused a message,
        /// see `waitingForAdmission`), or the reason to drop the connection. With a `verifier`,
        /// a message must come as segments it accepts, each checked before its data is kept.
        /// `admit` is asked, before a segmented message's assembly is allocated, whether the
        /// connection may hold the given number of bytes (`chargeFloor` once admitted).
        mutating func next(verifier: Verifier? = nil, admit: (Int) -> Bool = { _ in true }) -> Result<Frame?, FrameError> {
            waitingForAdmission = nil
            while true {
                guard pendingByteCount >= 4 else { return .success(nil) }
                let length = length(at: start)
                guard length <= PortWireFormat.maximumBodyLength else { return .failure(.oversized(length)) }
                if verifier != nil && assembling == nil && length > PortWireFormat.firstSegmentLimit {
                    return .failure(
                        .unauthenticated(
                            "a frame of \(length) bytes where a message's first segment (at most "
                                + "\(PortWireFormat.firstSegmentLimit) bytes, verified before more is read) must come"))
                }
                let bodyStart = start + 4
                guard pendingByteCount >= 4 + length else {
                    if !headChecked {
                        let authenticated = verifier != nil
                        let inMessage = assembling != nil
                        let head = buffer.withUnsafeBytes { all in
                            PortWireFormat.inspectHead(
                                UnsafeRawBufferPointer(rebasing: all[bodyStart...]), length: length,
                                authenticated: authenticated, assembling: inMessage)
                        }
                        switch head {
                        case .needMore: break
                        case .fine: headChecked = true
                        case .refused(let error): return .failure(error)
                        }
                    }
                    return .success(nil)
                }
                let step: Step
                do {
                    // A second reference to the bytes (no copy: the buffer is not changed while
                    // it lives), so that the assembly can change while they are read. Scoped, so
                    // that the buffer is unique again before it is emptied below.
                    let bytes = buffer
                    step = bytes.withUnsafeBytes { all in
                        take(UnsafeRawBufferPointer(rebasing: all[bodyStart..<bodyStart + length]), verifier: verifier, admit: admit)
                    }
                }
                if case .wait = step { return .success(nil) }
                start = bodyStart + length
                headChecked = false
                if start == buffer.count {
                    // Drained: a buffer a big frame grew is given back.
                    if buffer.capacity > Decoder.keptCapacity { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
                    start = 0
                }
                switch step {
                case .message(let frame): return .success(frame)
                case .failure(let error): return .failure(error)
                case .taken, .wait: continue
                }
            }
        }

        private enum Step { case message(Frame), taken, wait, failure(FrameError) }

        /// One complete frame (the bytes after its length).
        private mutating func take(_ bytes: UnsafeRawBufferPointer, verifier: Verifier?, admit: (Int) -> Bool) -> Step {
            if bytes.starts(with: PortWireFormat.segmentMagic) { return segment(bytes, verifier: verifier, admit: admit) }
            if bytes.starts(with: PortWireFormat.envelopeMagic) { return .failure(PortWireFormat.oldEnvelope) }
            if verifier != nil { return .failure(PortWireFormat.notAuthenticated) }
            if assembling != nil { return .failure(PortWireFormat.plainInsideMessage) }
            var reader = Reader(bytes: bytes, partial: false)
            switch reader.frame() {
            case .success(let frame): return .message(frame)
            case .failure(let error): return .failure(error)
            }
        }

        /// One complete segment: checked against the message being assembled, verified, then
        /// its data kept (or, a message in one segment, decoded at once).
        private mutating func segment(_ bytes: UnsafeRawBufferPointer, verifier: Verifier?, admit: (Int) -> Bool) -> Step {
            let h = PortWireFormat.segmentHeaderLength
            guard bytes.count >= h + 2 else { return .failure(.malformed("a segment of \(bytes.count) bytes, shorter than its header")) }
            func field(_ offset: Int, _ size: Int) -> UInt64 {
                var value: UInt64 = 0
                for i in 0..<size { value = value << 8 | UInt64(bytes[offset + i]) }
                return value
            }
            guard bytes[4] == PortWireFormat.segmentVersion else { return .failure(.malformed("unknown segment version \(bytes[4])")) }
            let message = field(5, 8)
            let index = UInt32(field(13, 4))
            let total = Int(field(17, 4))
            let n = Int(field(bytes.count - 2, 2))
            guard n <= PortWireFormat.maximumAuthenticationLength, h + n + 2 <= bytes.count else {
                return .failure(.malformed("\(n) bytes of authentication data in a segment of \(bytes.count) bytes"))
            }
            let d = bytes.count - h - n - 2
            guard total <= PortWireFormat.maximumBodyLength else { return .failure(.oversized(total)) }
            guard total > 0 else { return .failure(.malformed("a segmented message of 0 bytes")) }
            if let current = assembling {
                guard index == current.next, message == current.message, total == current.total else {
                    return .failure(
                        .malformed(
                            "segment \(index) of a message of \(total) bytes where segment \(current.next) "
                                + "of the message being assembled (\(current.total) bytes) was due"))
                }
                let most = min(PortWireFormat.segmentData, total - assembly.count)
                guard d >= 1, d <= most else { return .failure(.malformed("a segment of \(d) data bytes where 1 to \(most) may come")) }
            } else {
                guard index == 0 else { return .failure(.malformed("segment \(index) of a message whose first segment never came")) }
                let most = min(PortWireFormat.firstSegmentData, total)
                guard d >= 1, d <= most else {
                    return .failure(.malformed("a first segment of \(d) data bytes where 1 to \(most) may come"))
                }
            }
            if let verifier {
                let signed = UnsafeRawBufferPointer(rebasing: bytes[0..<h + d])
                let auth = UnsafeRawBufferPointer(rebasing: bytes[h + d..<h + d + n])
                guard verifier(signed, auth) else { return .failure(PortWireFormat.mismatch) }
            }
            let data = UnsafeRawBufferPointer(rebasing: bytes[h..<h + d])
            if assembling == nil {
                if d == total {
                    var reader = Reader(bytes: data, partial: false)
                    switch reader.frame() {
                    case .success(let frame): return .message(frame)
                    case .failure(let error): return .failure(error)
                    }
                }
                let floor = total + Decoder.rawWorkspace
                guard admit(floor) else {
                    waitingForAdmission = floor
                    return .wait
                }
                assembly.reserveCapacity(total)
                assembling = Assembling(message: message, total: total, next: 1)
            } else {
                assembling!.next += 1
            }
            assembly.append(contentsOf: data)
            if !assembling!.headChecked {
                switch assembly.withUnsafeBytes({ PortWireFormat.inspectBody($0) }) {
                case .needMore: break
                case .fine: assembling!.headChecked = true
                case .refused(let error): return .failure(error)
                }
            }
            guard assembly.count == total else { return .taken }
            let result = assembly.withUnsafeBytes { all in
                var reader = Reader(bytes: all, partial: false)
                return reader.frame()
            }
            assembly = []
            assembling = nil
            switch result {
            case .success(let frame): return .message(frame)
            case .failure(let error): return .failure(error)
            }
        }
    }

    static let oldEnvelope = FrameError.malformed(
        "an authenticated envelope of wire version 1 (\"TKPA\"); authenticated messages now "
            + "come as segments (\"TKPS\", version 2). Fix: run the same ThreadKit on both ends")
    static let notAuthenticated = FrameError.unauthenticated("it carries no authentication data, and this port requires it")
    static let mismatch = FrameError.unauthenticated("its authentication data does not match (another key, or an altered frame)")
    static let plainInsideMessage = FrameError.malformed("a plain frame where the next segment of a message was due")

    enum HeadCheck: Equatable { case needMore, fine, refused(FrameError) }

    /// Checks the first bytes of a frame of `length` after its length (as many as have arrived).
    static func inspectHead(_ prefix: UnsafeRawBufferPointer, length: Int, authenticated: Bool, assembling: Bool) -> HeadCheck {
        guard prefix.count >= 4 else { return .needMore }
        if prefix.starts(with: segmentMagic) {
            let limit = assembling ? segmentLimit : firstSegmentLimit
            guard length <= limit else {
                return .refused(.malformed("a \(assembling ? "" : "first ")segment of \(length) bytes, over the \(limit) one may have"))
            }
            guard prefix.count >= 5 else { return .needMore }
            return prefix[4] == segmentVersion ? .fine : .refused(.malformed("unknown segment version \(prefix[4])"))
        }
        if prefix.starts(with: envelopeMagic) { return .refused(oldEnvelope) }
        if authenticated { return .refused(notAuthenticated) }
        if assembling { return .refused(plainInsideMessage) }
        return inspectBody(prefix)
    }

    /// Checks the first bytes of a body (magic, version, reply port, component count).
    static func inspectBody(_ prefix: UnsafeRawBufferPointer) -> HeadCheck {
        var reader = Reader(bytes: prefix, partial: true)
        do {
            _ = try reader.head()
            return .fine
        } catch let error as FrameError {
            return .refused(error)
        } catch {
            return .needMore
        }
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
                guard count <= (bytes.count - offset) / 2 else {
                    throw FrameError.malformed("\(count) components in \(bytes.count - offset) bytes")
                }
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

        /// Magic, version, msgid, reply port and the component count (checked against the limit).
        mutating func head() throws -> (msgid: UInt32, reply: TKSocketAddress?, count: Int) {
            guard try take(4).elementsEqual(PortWireFormat.magic) else {
                throw FrameError.malformed("bad magic (not a ThreadKit port frame)")
            }
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
