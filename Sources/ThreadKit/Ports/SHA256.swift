// SHA256: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the shared-key authentication of
// socket-port frames (TKSocketPortAuthenticator.sharedKey). Written here because the library has
// no dependencies; checked against the FIPS 180-4 examples and the RFC 4231 test vectors
// (Tests/ThreadKitTests/SHA256Tests.swift). A value type owned by whoever hashes; no shared state.

/// Incremental SHA-256: `update` with the message in any number of pieces, then `finalize`.
struct SHA256 {
    static let digestLength = 32
    static let blockLength = 64

    private static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19)
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
                        w[i] = UInt32(blocks[p]) &<< 24 | UInt32(blocks[p &+ 1]) &<< 16 | UInt32(blocks[p &+ 2]) &<< 8 | UInt32(blocks[p &+ 3])
                    }
                    for i in 16..<64 {
                        let x = w[i &- 15], y = w[i &- 2]
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
                        hh = g; g = f; f = e; e = d &+ t1
                        d = c; c = b; b = a; a = t1 &+ t2
                    }
                    state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e, state.5 &+ f, state.6 &+ g, state.7 &+ hh)
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
