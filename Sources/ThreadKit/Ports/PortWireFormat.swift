// PortWireFormat: how TKSocketPort puts a TKPortMessage on a byte stream and takes it off again
// (docs/Ports.md, "Wire format", is the reference). Pure functions and a per-connection decoder
// value (PortWireFormat+Decoder.swift), owned by the connection that feeds it.
//
//   frame     := length:u32 (body | envelope)         length = byte count after it, ≤ 64 MiB
//   envelope  := "TKPA" body auth{n} n:u16             (authenticated: auth signs body, n ≤ 1024)
//   body      := "TKPM" version:u8(1) msgid:u32 reply:portref count:u32 component{count}
//   component := 0x00 length:u32 bytes{length}        (data)
//              | 0x01 portref                          (port)
//   portref   := 0x00                                  (none; only as reply)
//              | 0x01 port:u16 length:u16 host{length} (TCP)
//              | 0x02 length:u16 path{length}          (Unix socket)
// Integers are big-endian. A frame whose length is over the limit, whose body does not parse
// exactly to its end, which carries more components or port references than a message may, which
// fails authentication, or which a closed connection leaves unfinished, is refused.

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
    /// The most components one message may carry (a count beyond it is refused from the frame's
    /// first bytes, before the rest is read).
    static let maximumComponents = 65_536
    /// The most port references (port components and the reply port) one message may carry: each
    /// becomes a remote port on the receiving side.
    static let maximumPortReferences = 256
    /// The most bytes of authentication data an envelope may carry.
    static let maximumAuthenticationLength = 1_024
    static let magic: [UInt8] = Array("TKPM".utf8)
    static let envelopeMagic: [UInt8] = Array("TKPA".utf8)
    static let version: UInt8 = 1

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

    /// The bytes of one frame, or why it cannot be sent. With `sign`, the body goes in an
    /// authenticated envelope carrying what `sign` computes over it.
    static func encode(_ frame: Frame, sign: Signer? = nil) -> Result<[UInt8], FrameError> {
        guard frame.components.count <= maximumComponents else {
            return .failure(.overLimit("\(frame.components.count) components, over the limit of \(maximumComponents) per message"))
        }
        let references = frame.components.count(where: { if case .port = $0 { true } else { false } }) + (frame.reply == nil ? 0 : 1)
        guard references <= maximumPortReferences else {
            return .failure(.overLimit("\(references) port references, over the limit of \(maximumPortReferences) per message"))
        }
        var body: [UInt8] = []
        var capacity = 4 + 1 + 4 + 4 + 64
        for case .data(let bytes) in frame.components { capacity += 5 + bytes.count }
        guard capacity <= maximumBodyLength + 64 else { return .failure(.oversized(capacity)) }
        body.reserveCapacity(capacity + 4 + (sign == nil ? 0 : 4 + 2 + 64))
        body += [0, 0, 0, 0]   // the length, filled in below
        if sign != nil { body += envelopeMagic }
        let bodyStart = body.count
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
        if let sign {
            let auth = body.withUnsafeBytes { sign(UnsafeRawBufferPointer(rebasing: $0[bodyStart...])) }
            guard auth.count <= maximumAuthenticationLength else {
                return .failure(.overLimit("\(auth.count) bytes of authentication data, over the limit of \(maximumAuthenticationLength)"))
            }
            body += auth
            append16(auth.count, to: &body)
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
}
