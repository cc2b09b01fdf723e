// TKSocketPortAuthenticator: who may put messages into a socket port, decided per segment of each
// message (NSConnection's delegate pair `authenticationData(forComponents:)` /
// `authenticateComponents(_:withData:)`). Immutable value; its closures run on the sending thread
// (`sign`) and on the receiving port's I/O loop thread (`verify`), possibly at once, so they must
// be thread-safe. docs/Ports.md, "Authentication", describes the segments they fill and check.

/// Signs the messages a remote `TKSocketPort` sends and verifies those a listening one receives.
/// A signed message travels as segments (its first 1 KiB, then up to 64 KiB each), each signed
/// on its own. A listening port with an authenticator refuses every segment whose
/// authentication data `verify` does not accept (and every frame that is not a segment), before
/// it keeps any of its data, closing that connection and reporting it through
/// `connectionErrorHandler`. Until it has verified a message's first segment it reads at most
/// 2,071 bytes of it, so a peer without the key costs it one small verification per connection.
public struct TKSocketPortAuthenticator: Sendable {
    /// The authentication data sent with a segment, computed over the segment as it goes on the
    /// wire up to its data's end: its header (message number, index, the message's total
    /// length) and its share of the encoded message (message id, reply port and components).
    /// At most 1,024 bytes. The buffer is valid only during the call.
    public let sign: @Sendable (_ body: UnsafeRawBufferPointer) -> [UInt8]
    /// Whether `data` authenticates `body` (a segment, as `sign` saw it). Both buffers are valid
    /// only during the call.
    public let verify: @Sendable (_ body: UnsafeRawBufferPointer, _ data: UnsafeRawBufferPointer) -> Bool

    /// An authenticator from your own pair of closures, which may run on several threads at once:
    /// `sign` computes a segment's authentication data (at most 1,024 bytes), and `verify` accepts
    /// or refuses a segment with the data that came with it. For a shared secret, use ``sharedKey(_:)``.
    public init(
        sign: @escaping @Sendable (_ body: UnsafeRawBufferPointer) -> [UInt8],
        verify: @escaping @Sendable (_ body: UnsafeRawBufferPointer, _ data: UnsafeRawBufferPointer) -> Bool
    ) {
        self.sign = sign
        self.verify = verify
    }

    /// The smallest shared key accepted, in bytes.
    public static let minimumKeyLength = 16

    /// HMAC-SHA256 over each segment under `key`, a secret both processes hold (at least 16
    /// bytes; 32 random bytes is right). It proves a message comes from a key holder and was not
    /// altered; it neither hides the contents nor stops a recorded message from being sent again.
    public static func sharedKey(_ key: [UInt8]) throws(TKError) -> TKSocketPortAuthenticator {
        guard key.count >= minimumKeyLength else {
            throw TKError(
                .invalidArgument,
                "TKSocketPortAuthenticator.sharedKey: a key of \(key.count) bytes is too short to protect anything. "
                    + "Fix: use at least \(minimumKeyLength) random bytes (32 is right for HMAC-SHA256).")
        }
        return TKSocketPortAuthenticator(
            sign: { body in SHA256.hmac(key: key, message: body) },
            verify: { body, data in
                SHA256.hmac(key: key, message: body).withUnsafeBytes { SHA256.constantTimeEqual($0, data) }
            })
    }
}
