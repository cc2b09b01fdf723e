// SHA256: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the shared-key authentication of
// socket-port frames (TKSocketPortAuthenticator.sharedKey). Written here because the library has
// no dependencies; checked against the FIPS 180-4 examples and the RFC 4231 test vectors
// (Tests/ThreadKitTests/SHA256Tests.swift). A value type owned by whoever hashes; no shared state.

/// Incremental SHA-256: `update` with the message in any number of pieces, then `finalize`.
struct SHA256 {
    static let digestLength = 32
    static let blockLength = 64

    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19)
    /// Bytes of an unfinished block, and the message length so far.
    private var pending: [UInt8] = []
    private var length: UInt64 = 0

    init() { pending.reserveCapacity(SHA256.blockLength) }

    /// The digest of `bytes` at once.
    static func hash(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    static func hash(_ bytes: [UInt8]) -> [UInt8] { bytes.withUnsafeBytes { hash($0) } }

    mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        length &+= UInt64(bytes.count)
        var offset = 0
        if !pending.isEmpty {
            let take = min(SHA256.blockLength - pending.count, bytes.count)
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<take]))
            offset = take
            guard pending.count == SHA256.blockLength else { return }
            let block = pending
            block.withUnsafeBytes { compress($0) }
            pending.removeAll(keepingCapacity: true)
        }
        let blocks = (bytes.count - offset) / SHA256.blockLength
        if blocks > 0 {
            compress(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + blocks * SHA256.blockLength]))
            offset += blocks * SHA256.blockLength
        }
        pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
    }

    /// Pads, processes the last blocks and returns the 32-byte digest.
    mutating func finalize() -> [UInt8] {
        let bits = length &* 8
        var tail: [UInt8] = [0x80]
        let used = (pending.count + 1) % SHA256.blockLength
        tail += [UInt8](repeating: 0, count: (SHA256.blockLength - 8 - used + SHA256.blockLength) % SHA256.blockLength)
        for i in 0..<8 { tail.append(UInt8(truncatingIfNeeded: bits >> (56 - 8 * i))) }
        let saved = length
        update(tail)
        length = saved
        var digest: [UInt8] = []
        digest.reserveCapacity(SHA256.digestLength)
        for word in [h.0, h.1, h.2, h.3, h.4, h.5, h.6, h.7] {
            for i in 0..<4 { digest.append(UInt8(truncatingIfNeeded: word >> (24 - 8 * i))) }
        }
        return digest
    }

    /// Processes whole blocks (`blocks.count` a multiple of 64). One scratch schedule for all of
    /// them, a local view of `k` and static helpers: in unoptimized builds an instance method
    /// copies `self` (retaining `pending`) at every call and each temporary allocation is cleared,
    /// which made hashing several times slower.
    private mutating func compress(_ blocks: UnsafeRawBufferPointer) {
        var state = h
        SHA256.k.withUnsafeBufferPointer { k in
            withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
                var base = 0
                while base < blocks.count {
                    for i in 0..<16 {
                        let p = base &+ 4 &* i
                        w[i] =
                            UInt32(blocks[p]) &<< 24 | UInt32(blocks[p &+ 1]) &<< 16 | UInt32(blocks[p &+ 2]) &<< 8 | UInt32(blocks[p &+ 3])
                    }
                    for i in 16..<64 {
                        let x = w[i &- 15]
                        let y = w[i &- 2]
                        let s0 = SHA256.rotr(x, 7) ^ SHA256.rotr(x, 18) ^ (x &>> 3)
                        let s1 = SHA256.rotr(y, 17) ^ SHA256.rotr(y, 19) ^ (y &>> 10)
                        w[i] = w[i &- 16] &+ s0 &+ w[i &- 7] &+ s1
                    }
                    var (a, b, c, d, e, f, g, hh) = state
                    for i in 0..<64 {
                        let s1 = SHA256.rotr(e, 6) ^ SHA256.rotr(e, 11) ^ SHA256.rotr(e, 25)
                        let choice = (e & f) ^ (~e & g)
                        let t1 = hh &+ s1 &+ choice &+ k[i] &+ w[i]
                        let s0 = SHA256.rotr(a, 2) ^ SHA256.rotr(a, 13) ^ SHA256.rotr(a, 22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let t2 = s0 &+ majority
                        hh = g
                        g = f
                        f = e
                        e = d &+ t1
                        d = c
                        c = b
                        b = a
                        a = t1 &+ t2
                    }
                    state = (
                        state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e, state.5 &+ f, state.6 &+ g, state.7 &+ hh
                    )
                    base &+= SHA256.blockLength
                }
            }
        }
        h = state
    }

    @inline(__always) private static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { x &>> n | x &<< (32 &- n) }

    // MARK: HMAC (RFC 2104)

    /// HMAC-SHA256 of `message` under `key`.
    static func hmac(key: [UInt8], message: UnsafeRawBufferPointer) -> [UInt8] {
        var block = key.count > blockLength ? hash(key) : key
        block += [UInt8](repeating: 0, count: blockLength - block.count)
        var inner = SHA256()
        inner.update(block.map { $0 ^ 0x36 })
        inner.update(message)
        var outer = SHA256()
        outer.update(block.map { $0 ^ 0x5c })
        outer.update(inner.finalize())
        return outer.finalize()
    }

    static func hmac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        message.withUnsafeBytes { hmac(key: key, message: $0) }
    }

    /// Compares two byte strings in time that depends only on their lengths (a MAC check must
    /// not tell an attacker how many leading bytes were right).
    static func constantTimeEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<a.count { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}
