// TKAtomicBits: OSAtomicTestAndSet / OSAtomicTestAndClear on memory of any length: bit n is
// `0x80 >> (n & 7)` of byte `n >> 3` from the given address, set or cleared with one atomic
// read-modify-write of that byte (CThreadKit's byte OR/AND). Thread-safe as far as every thread
// touching those bytes uses atomics. `barrier: true` is sequentially consistent, `false` relaxed.
import CThreadKit

/// Sets bit `n` of the bytes at `address` (OSAtomicTestAndSet's numbering: bit n is
/// `0x80 >> (n & 7)` of byte `n >> 3`) and returns its previous value. The caller guarantees that
/// byte `n >> 3` is inside its memory; a negative `n` is a misuse.
@discardableResult
public func TKAtomicTestAndSet(bit n: Int, in address: UnsafeMutableRawPointer, barrier: Bool = true) -> Bool {
    let (byte, mask) = atomicBitPosition(n, call: "TKAtomicTestAndSet")
    return tk_atomic_fetch_or_u8(byte(address), mask, barrier ? 1 : 0) & mask != 0
}

/// Clears bit `n` of the bytes at `address` (numbered as in `TKAtomicTestAndSet`) and returns its
/// previous value.
@discardableResult
public func TKAtomicTestAndClear(bit n: Int, in address: UnsafeMutableRawPointer, barrier: Bool = true) -> Bool {
    let (byte, mask) = atomicBitPosition(n, call: "TKAtomicTestAndClear")
    return tk_atomic_fetch_and_u8(byte(address), ~mask, barrier ? 1 : 0) & mask != 0
}

/// `TKAtomicTestAndSet` on a buffer, checked: a bit outside it is a misuse.
@discardableResult
public func TKAtomicTestAndSet(bit n: Int, in buffer: UnsafeMutableRawBufferPointer, barrier: Bool = true) -> Bool {
    TKAtomicTestAndSet(bit: n, in: checkedBase(buffer, bit: n, call: "TKAtomicTestAndSet"), barrier: barrier)
}

/// `TKAtomicTestAndClear` on a buffer, checked: a bit outside it is a misuse.
@discardableResult
public func TKAtomicTestAndClear(bit n: Int, in buffer: UnsafeMutableRawBufferPointer, barrier: Bool = true) -> Bool {
    TKAtomicTestAndClear(bit: n, in: checkedBase(buffer, bit: n, call: "TKAtomicTestAndClear"), barrier: barrier)
}

/// The byte holding bit `n` (as a function of the base address) and the bit's mask in it.
private func atomicBitPosition(_ n: Int, call: String)
    -> (byte: (UnsafeMutableRawPointer) -> UnsafeMutablePointer<UInt8>, mask: UInt8)
{
    guard n >= 0 else {
        misuse("\(call)(bit: \(n), in:): bit numbers start at 0. Fix: pass a bit number of 0 or more.")
    }
    let mask = UInt8(truncatingIfNeeded: 0x80 >> (n & 7))
    return ({ ($0 + (n >> 3)).assumingMemoryBound(to: UInt8.self) }, mask)
}

private func checkedBase(_ buffer: UnsafeMutableRawBufferPointer, bit n: Int, call: String) -> UnsafeMutableRawPointer {
    guard let base = buffer.baseAddress, n >= 0, n < buffer.count * 8 else {
        misuse(
            "\(call)(bit: \(n), in: a \(buffer.count)-byte buffer): the bit must be in 0..<\(buffer.count * 8). "
                + "Fix: pass a bit number inside the buffer, or a larger buffer.")
    }
    return base
}
