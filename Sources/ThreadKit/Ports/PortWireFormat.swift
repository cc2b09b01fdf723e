// PortWireFormat: how TKSocketPort puts a TKPortMessage on a byte stream and takes it off again
// (docs/Ports.md, "Wire format" is the reference). Pure functions and a per-connection decoder
// value (PortWireFormat+Decoder.swift), owned by the connection that feeds it.
//
//   frame     := length:u32 (body | segment)           length = byte count after it, ≤ 64 MiB
//   segment   := "TKPS" version:u8(2) message:u64 index:u32 total:u32 data{d} auth{n} n:u16
//                                                      (authenticated: auth signs everything
//                                                       from "TKPS" to the end of data, n ≤ 1024)
//   body      := "TKPM" version:u8(1) msgid:u32 reply:portref count:u32 component{count}
//   component := 0x00 length:u32 bytes{length}        (data)
//              | 0x01 portref                          (port)
//   portref   := 0x00                                  (none; only as reply)
//              | 0x01 port:u16 length:u16 host{length} (TCP)
//              | 0x02 length:u16 path{length}          (Unix socket)
// A signed message is its body cut into segments, sent back to back: segment 0 carries at most
// 1 KiB of it, the others at most 64 KiB each, their `data` together is the body (`total` bytes),
// and every segment is verified before its data is kept. So a listener that verifies holds at
// most one small unverified segment per connection, however long the message claims to be.
// Integers are big-endian. A frame whose length is over the limit, whose body does not parse
// exactly to its end, which carries more components or port references than a message may, which
// fails authentication, which breaks the order of segments, or which a closed connection leaves
// unfinished, is refused.
import Synchronization

/// Where a socket port listens: what a port component or a reply port carries across processes.
public enum TKSocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// A TCP listener at `host` (a name or an address) and `port`.
    case tcp(host: String, port: UInt16)
    /// A Unix-domain socket listener at the socket file `path`.
    case unix(path: String)

    /// `tcp HOST:PORT` or `unix PATH`.
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
    /// The most components one message may carry (a count beyond it is refused from the frame's
    /// first bytes, before the rest is read).
    static let maximumComponents = 65_536
    /// The most port references (port components and the reply port) one message may carry: each
    /// becomes a remote port on the receiving side.
    static let maximumPortReferences = 256
    /// The most bytes of authentication data a segment may carry.
    static let maximumAuthenticationLength = 1_024
    static let magic: [UInt8] = Array("TKPM".utf8)
    static let version: UInt8 = 1
    /// The authenticated envelope of wire version 1 (a whole body, signed at its end): no longer
    /// sent or read, named so that a frame from an old sender is refused with a reason.
    static let envelopeMagic: [UInt8] = Array("TKPA".utf8)
    static let segmentMagic: [UInt8] = Array("TKPS".utf8)
    static let segmentVersion: UInt8 = 2
    /// Magic, version, message, index and total: the bytes of a segment before its data.
    static let segmentHeaderLength = 4 + 1 + 8 + 4 + 4
    /// The most body bytes a message's first segment carries: all a verifying listener reads
    /// from a connection before it has verified something.
    static let firstSegmentData = 1_024
    /// The most body bytes any later segment carries.
    static let segmentData = 64 << 10
    /// The longest first segment (its length field), authentication data included: 2,071 bytes.
    static let firstSegmentLimit = segmentHeaderLength + firstSegmentData + maximumAuthenticationLength + 2
    /// The longest later segment: 66,583 bytes.
    static let segmentLimit = segmentHeaderLength + segmentData + maximumAuthenticationLength + 2

    /// Computes the authentication data of a body (TKSocketPortAuthenticator.sign).
    typealias Signer = @Sendable (UnsafeRawBufferPointer) -> [UInt8]
    /// Whether authentication data (second) authenticates a body (first).
    typealias Verifier = @Sendable (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Bool

    /// A message as it crosses the wire: ports are addresses.
    struct Frame: Equatable {
        enum Component: Equatable { case data([UInt8]), port(TKSocketAddress) }
        var msgid: UInt32
        var reply: TKSocketAddress?
        var components: [Component]
    }

    // MARK: Encoding

    /// Distinguishes the segmented messages of a process (a random start, then counting), so
    /// that segments of two messages cannot be spliced into one.
    private static let messageBase = UInt64.random(in: .min ... .max)
    private static let messageCount = Atomic<UInt64>(0)

    static func nextMessage() -> UInt64 {
        messageBase &+ messageCount.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// The bytes of one message, or why it cannot be sent: one frame, or with `sign` the
    /// segments of its body, each carrying what `sign` computes over it.
    static func encode(_ frame: Frame, sign: Signer? = nil, message: UInt64? = nil) -> Result<[UInt8], FrameError> {
        guard frame.components.count <= maximumComponents else {
            return .failure(.overLimit("\(frame.components.count) components, over the limit of \(maximumComponents) per message"))
        }
        let references = frame.components.count(where: { if case .port = $0 { true } else { false } }) + (frame.reply == nil ? 0 : 1)
        guard references <= maximumPortReferences else {
            return .failure(.overLimit("\(references) port references, over the limit of \(maximumPortReferences) per message"))
        }
        var capacity = 4 + 1 + 4 + 4 + 64
        for case .data(let bytes) in frame.components { capacity += 5 + bytes.count }
        guard capacity <= maximumBodyLength + 64 else { return .failure(.oversized(capacity)) }
        // Unsigned, the body follows its length in the same array; signed, it is cut up below.
        let prefix = sign == nil ? 4 : 0
        var body: [UInt8] = []
        body.reserveCapacity(capacity + prefix)
        body += [UInt8](repeating: 0, count: prefix)
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
        let length = body.count - prefix
        guard length <= maximumBodyLength else { return .failure(.oversized(length)) }
        guard let sign else {
            for i in 0..<4 { body[i] = UInt8(truncatingIfNeeded: UInt32(length) >> (24 - 8 * i)) }
            return .success(body)
        }
        return segments(of: body, sign: sign, message: message ?? nextMessage())
    }

    /// A body cut into signed segments (1 KiB, then 64 KiB each).
    private static func segments(of body: [UInt8], sign: Signer, message: UInt64) -> Result<[UInt8], FrameError> {
        let total = body.count
        let later = max(0, total - firstSegmentData)
        let count = 1 + (later + segmentData - 1) / segmentData
        var out: [UInt8] = []
        out.reserveCapacity(total + count * (4 + segmentHeaderLength + 2 + 64))
        var offset = 0
        var index: UInt32 = 0
        while offset < total {
            let d = min(index == 0 ? firstSegmentData : segmentData, total - offset)
            let start = out.count
            out += [0, 0, 0, 0] // the length, filled in below
            out += segmentMagic
            out.append(segmentVersion)
            append32(UInt32(truncatingIfNeeded: message >> 32), to: &out)
            append32(UInt32(truncatingIfNeeded: message), to: &out)
            append32(index, to: &out)
            append32(UInt32(total), to: &out)
            out += body[offset..<offset + d]
            let signedEnd = out.count
            let auth = out.withUnsafeBytes { sign(UnsafeRawBufferPointer(rebasing: $0[start + 4..<signedEnd])) }
            guard auth.count <= maximumAuthenticationLength else {
                return .failure(.overLimit("\(auth.count) bytes of authentication data, over the limit of \(maximumAuthenticationLength)"))
            }
            out += auth
            append16(auth.count, to: &out)
            let length = out.count - start - 4
            for i in 0..<4 { out[start + i] = UInt8(truncatingIfNeeded: UInt32(length) >> (24 - 8 * i)) }
            offset += d
            index += 1
        }
        return .success(out)
    }

    private static func append32(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes += [
            UInt8(truncatingIfNeeded: value >> 24), UInt8(truncatingIfNeeded: value >> 16),
            UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value),
        ]
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
}
