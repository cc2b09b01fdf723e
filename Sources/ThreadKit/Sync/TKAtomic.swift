// TKAtomic: OSAtomic's integer operations as objects (TKAtomicInt32, TKAtomicInt64,
// TKAtomicUInt32, TKAtomicUInt64, and the pointer-sized TKAtomicInt and TKAtomicUInt, OSAtomic's
// "Long"/"Ptr" width). Thread-safe. `barrier: true` (the OSAtomic…Barrier variants) is sequentially
// consistent; `barrier: false` is relaxed, exactly like the plain OSAtomic functions, which
// order nothing but the operation itself. Pointers: TKAtomicPointer.swift; bits of any byte
// buffer: TKAtomicBits.swift.
import Synchronization

public typealias TKAtomicInt32 = TKAtomic<Int32>
public typealias TKAtomicInt64 = TKAtomic<Int64>
public typealias TKAtomicUInt32 = TKAtomic<UInt32>
public typealias TKAtomicUInt64 = TKAtomic<UInt64>
/// Pointer-sized (OSAtomic's `…Long` and `…Ptr` integer width).
public typealias TKAtomicInt = TKAtomic<Int>
public typealias TKAtomicUInt = TKAtomic<UInt>

/// An integer with OSAtomic semantics: arithmetic and bitwise operations return the *new* value,
/// `testAndSet`/`testAndClear` use OSAtomicTestAndSet's bit numbering and return the old bit.
/// The value lives in an atomic `Value.Word`, the signed integer of its width: two's-complement arithmetic and bitwise operations give the same bits either
/// way, and the conversions compile to nothing.
public final class TKAtomic<Value: TKAtomicInteger>: @unchecked Sendable {
    public typealias Word = Value.Word
    @usableFromInline let storage: Atomic<Word>

    public init(_ value: Value) { storage = Atomic(Word(truncatingIfNeeded: value)) }

    @inlinable public func load() -> Value { Value(truncatingIfNeeded: Word.load(storage)) }
    @inlinable public func store(_ value: Value) { Word.store(storage, Word(truncatingIfNeeded: value)) }

    @inlinable @discardableResult
    public func add(_ amount: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: amount)
        return Value(truncatingIfNeeded: Word.fetchAdd(storage, word, barrier: barrier) &+ word)
    }
    @inlinable @discardableResult
    public func increment(barrier: Bool = true) -> Value { add(1, barrier: barrier) }
    @inlinable @discardableResult
    public func decrement(barrier: Bool = true) -> Value { add(0 &- 1, barrier: barrier) }

    @inlinable @discardableResult
    public func or(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchOr(storage, word, barrier: barrier) | word)
    }
    @inlinable @discardableResult
    public func and(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchAnd(storage, word, barrier: barrier) & word)
    }
    @inlinable @discardableResult
    public func xor(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchXor(storage, word, barrier: barrier) ^ word)
    }

    @inlinable
    public func compareAndSwap(expected: Value, desired: Value, barrier: Bool = true) -> Bool {
        Word.compareExchange(storage, Word(truncatingIfNeeded: expected), Word(truncatingIfNeeded: desired), barrier: barrier)
    }

    /// Sets bit `n` and returns its previous value. The numbering is OSAtomicTestAndSet's: bit n is
    /// `0x80 >> (n & 7)` of byte `n >> 3` of the value in memory (little-endian on every platform
    /// ThreadKit runs on), so bit 0 is the value's 0x80, bit 7 its 0x01 and bit 15 its 0x100.
    @inlinable @discardableResult
    public func testAndSet(bit n: Int, barrier: Bool = true) -> Bool {
        let mask = Self.mask(bit: n, call: "testAndSet")
        return Word.fetchOr(storage, mask, barrier: barrier) & mask != 0
    }

    /// Clears bit `n` (numbered as in `testAndSet`) and returns its previous value.
    @inlinable @discardableResult
    public func testAndClear(bit n: Int, barrier: Bool = true) -> Bool {
        let mask = Self.mask(bit: n, call: "testAndClear")
        return Word.fetchAnd(storage, ~mask, barrier: barrier) & mask != 0
    }

    @usableFromInline
    static func mask(bit n: Int, call: String) -> Word {
        guard n >= 0, n < Value.bitWidth else {
            misuse("TKAtomic<\(Value.self)>.\(call)(bit: \(n)): the bit must be in 0..<\(Value.bitWidth). "
                   + "Fix: pass a bit number within the value's width, or use TKAtomicTestAndSet on a byte buffer.")
        }
        return Word(truncatingIfNeeded: 0x80 >> (n & 7)) << (8 * (n >> 3))
    }
}

/// The integer types TKAtomic holds: each names the atomic word of its width that stores it.
public protocol TKAtomicInteger: FixedWidthInteger, Sendable {
    associatedtype Word: TKAtomicWord
}

extension Int32: TKAtomicInteger { public typealias Word = Int32 }
extension UInt32: TKAtomicInteger { public typealias Word = Int32 }
extension Int64: TKAtomicInteger { public typealias Word = Int64 }
extension UInt64: TKAtomicInteger { public typealias Word = Int64 }
// ThreadKit runs on 64-bit platforms only (x86_64, arm64): Int and UInt are 64 bits wide.
extension Int: TKAtomicInteger { public typealias Word = Int64 }
extension UInt: TKAtomicInteger { public typealias Word = Int64 }

/// The atomic words under TKAtomic. Each forwards to Synchronization's `Atomic`, whose operations
/// exist per concrete type (not generically) and whose orderings must be compile-time constants,
/// hence one small function per operation and type, each with a `barrier` branch. The fetch
/// functions return the value *before* the operation.
public protocol TKAtomicWord: FixedWidthInteger, AtomicRepresentable, Sendable {
    static func load(_ atomic: borrowing Atomic<Self>) -> Self
    static func store(_ atomic: borrowing Atomic<Self>, _ value: Self)
    static func compareExchange(_ atomic: borrowing Atomic<Self>, _ expected: Self, _ desired: Self, barrier: Bool) -> Bool
    static func fetchAdd(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    static func fetchOr(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    static func fetchAnd(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    static func fetchXor(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
}

extension Int32: TKAtomicWord {
    @inlinable public static func load(_ a: borrowing Atomic<Int32>) -> Int32 { a.load(ordering: .sequentiallyConsistent) }
    @inlinable public static func store(_ a: borrowing Atomic<Int32>, _ v: Int32) { a.store(v, ordering: .sequentiallyConsistent) }
    @inlinable public static func compareExchange(_ a: borrowing Atomic<Int32>, _ e: Int32, _ d: Int32, barrier: Bool) -> Bool {
        barrier ? a.compareExchange(expected: e, desired: d, ordering: .sequentiallyConsistent).exchanged
            : a.compareExchange(expected: e, desired: d, ordering: .relaxed).exchanged
    }
    @inlinable public static func fetchAdd(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.wrappingAdd(v, ordering: .sequentiallyConsistent).oldValue : a.wrappingAdd(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchOr(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseOr(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseOr(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchAnd(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseAnd(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseAnd(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchXor(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseXor(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseXor(v, ordering: .relaxed).oldValue
    }
}

extension Int64: TKAtomicWord {
    @inlinable public static func load(_ a: borrowing Atomic<Int64>) -> Int64 { a.load(ordering: .sequentiallyConsistent) }
    @inlinable public static func store(_ a: borrowing Atomic<Int64>, _ v: Int64) { a.store(v, ordering: .sequentiallyConsistent) }
    @inlinable public static func compareExchange(_ a: borrowing Atomic<Int64>, _ e: Int64, _ d: Int64, barrier: Bool) -> Bool {
        barrier ? a.compareExchange(expected: e, desired: d, ordering: .sequentiallyConsistent).exchanged
            : a.compareExchange(expected: e, desired: d, ordering: .relaxed).exchanged
    }
    @inlinable public static func fetchAdd(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.wrappingAdd(v, ordering: .sequentiallyConsistent).oldValue : a.wrappingAdd(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchOr(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseOr(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseOr(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchAnd(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseAnd(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseAnd(v, ordering: .relaxed).oldValue
    }
    @inlinable public static func fetchXor(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseXor(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseXor(v, ordering: .relaxed).oldValue
    }
}

/// A full memory barrier (OSMemoryBarrier): no load or store moves across it in either direction.
public func TKMemoryBarrier() {
    atomicMemoryFence(ordering: .sequentiallyConsistent)
}
