// TKAtomic: OSAtomic's integer operations as objects (TKAtomicInt32, TKAtomicInt64,
// TKAtomicUInt32, TKAtomicUInt64, and the pointer-sized TKAtomicInt and TKAtomicUInt, OSAtomic's
// "Long"/"Ptr" width). Thread-safe. `barrier: true` (the OSAtomic…Barrier variants) is sequentially
// consistent; `barrier: false` is relaxed, exactly like the plain OSAtomic functions, which
// order nothing but the operation itself. Pointers: TKAtomicPointer.swift; bits of any byte
// buffer: TKAtomicBits.swift.
import Synchronization

/// A thread-safe 32-bit signed integer with OSAtomic's operations (`OSAtomicAdd32`, `OSAtomicOr32`, …).
public typealias TKAtomicInt32 = TKAtomic<Int32>
/// A thread-safe 64-bit signed integer with OSAtomic's operations (`OSAtomicAdd64`, …).
public typealias TKAtomicInt64 = TKAtomic<Int64>
/// A thread-safe 32-bit unsigned integer with OSAtomic's operations (the `…32` functions on a `uint32_t`).
public typealias TKAtomicUInt32 = TKAtomic<UInt32>
/// A thread-safe 64-bit unsigned integer with OSAtomic's operations.
public typealias TKAtomicUInt64 = TKAtomic<UInt64>
/// A thread-safe pointer-sized signed integer (OSAtomic's `…Long` and `…Ptr` integer width).
public typealias TKAtomicInt = TKAtomic<Int>
/// A thread-safe pointer-sized unsigned integer (OSAtomic's `…Long` and `…Ptr` integer width).
public typealias TKAtomicUInt = TKAtomic<UInt>

// safety: its only field is an `Atomic`.
/// An integer with OSAtomic semantics: arithmetic and bitwise operations return the *new* value,
/// `testAndSet`/`testAndClear` use OSAtomicTestAndSet's bit numbering and return the old bit.
/// The value lives in an atomic `Value.Word`, the signed integer of its width: two's-complement arithmetic and bitwise operations give the same bits either
/// way, and the conversions compile to nothing.
public final class TKAtomic<Value: TKAtomicInteger>: @unchecked Sendable {
    /// The signed atomic word of `Value`'s width that holds the value (`Int32` or `Int64`).
    public typealias Word = Value.Word
    @usableFromInline let storage: Atomic<Word>

    /// Creates an atomic integer holding `value`.
    public init(_ value: Value) { storage = Atomic(Word(truncatingIfNeeded: value)) }

    /// Returns the current value (a sequentially consistent load).
    @inlinable public func load() -> Value { Value(truncatingIfNeeded: Word.load(storage)) }
    /// Replaces the value with `value` (a sequentially consistent store).
    @inlinable public func store(_ value: Value) { Word.store(storage, Word(truncatingIfNeeded: value)) }

    /// Adds `amount` (wrapping on overflow) and returns the *new* value, like `OSAtomicAdd32`.
    /// `barrier: true` is `OSAtomicAdd32Barrier`: sequentially consistent; `false` is relaxed.
    @inlinable @discardableResult
    public func add(_ amount: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: amount)
        return Value(truncatingIfNeeded: Word.fetchAdd(storage, word, barrier: barrier) &+ word)
    }
    /// Adds 1 (wrapping) and returns the new value, like `OSAtomicIncrement32`; `barrier` as in ``add(_:barrier:)``.
    @inlinable @discardableResult
    public func increment(barrier: Bool = true) -> Value { add(1, barrier: barrier) }
    /// Subtracts 1 (wrapping) and returns the new value, like `OSAtomicDecrement32`; `barrier` as in ``add(_:barrier:)``.
    @inlinable @discardableResult
    public func decrement(barrier: Bool = true) -> Value { add(0 &- 1, barrier: barrier) }

    /// ORs `mask` into the value and returns the *new* value, like `OSAtomicOr32`;
    /// `barrier: true` is sequentially consistent, `false` relaxed.
    @inlinable @discardableResult
    public func or(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchOr(storage, word, barrier: barrier) | word)
    }
    /// ANDs `mask` into the value and returns the *new* value, like `OSAtomicAnd32`;
    /// `barrier: true` is sequentially consistent, `false` relaxed.
    @inlinable @discardableResult
    public func and(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchAnd(storage, word, barrier: barrier) & word)
    }
    /// XORs `mask` into the value and returns the *new* value, like `OSAtomicXor32`;
    /// `barrier: true` is sequentially consistent, `false` relaxed.
    @inlinable @discardableResult
    public func xor(_ mask: Value, barrier: Bool = true) -> Value {
        let word = Word(truncatingIfNeeded: mask)
        return Value(truncatingIfNeeded: Word.fetchXor(storage, word, barrier: barrier) ^ word)
    }

    /// Stores `desired` if the value equals `expected`, in one atomic step, and returns whether it
    /// did, like `OSAtomicCompareAndSwap32`. `barrier: true` is sequentially consistent (success or
    /// failure); `false` is relaxed.
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
            misuse(
                "TKAtomic<\(Value.self)>.\(call)(bit: \(n)): the bit must be in 0..<\(Value.bitWidth). "
                    + "Fix: pass a bit number within the value's width, or use TKAtomicTestAndSet on a byte buffer.")
        }
        return Word(truncatingIfNeeded: 0x80 >> (n & 7)) << (8 * (n >> 3))
    }
}

/// The integer types TKAtomic holds: each names the atomic word of its width that stores it.
public protocol TKAtomicInteger: FixedWidthInteger, Sendable {
    /// The signed atomic word of the same bit width that stores values of this type.
    associatedtype Word: TKAtomicWord
}

/// `Int32` is held by ``TKAtomicInt32`` in an `Int32` word.
extension Int32: TKAtomicInteger {
    /// The word of a ``TKAtomicInt32``: `Int32` itself.
    public typealias Word = Int32
}
/// `UInt32` is held by ``TKAtomicUInt32`` in an `Int32` word (same bits, two's complement).
extension UInt32: TKAtomicInteger {
    /// The word of a ``TKAtomicUInt32``: `Int32`, reinterpreted bit for bit.
    public typealias Word = Int32
}
/// `Int64` is held by ``TKAtomicInt64`` in an `Int64` word.
extension Int64: TKAtomicInteger {
    /// The word of a ``TKAtomicInt64``: `Int64` itself.
    public typealias Word = Int64
}
/// `UInt64` is held by ``TKAtomicUInt64`` in an `Int64` word (same bits, two's complement).
extension UInt64: TKAtomicInteger {
    /// The word of a ``TKAtomicUInt64``: `Int64`, reinterpreted bit for bit.
    public typealias Word = Int64
}
// ThreadKit runs on 64-bit platforms only (x86_64, arm64): Int and UInt are 64 bits wide.
/// `Int` is held by ``TKAtomicInt`` in an `Int64` word (ThreadKit runs on 64-bit platforms only).
extension Int: TKAtomicInteger {
    /// The word of a ``TKAtomicInt``: `Int64`.
    public typealias Word = Int64
}
/// `UInt` is held by ``TKAtomicUInt`` in an `Int64` word (ThreadKit runs on 64-bit platforms only).
extension UInt: TKAtomicInteger {
    /// The word of a ``TKAtomicUInt``: `Int64`, reinterpreted bit for bit.
    public typealias Word = Int64
}

/// The atomic words under TKAtomic. Each forwards to Synchronization's `Atomic`, whose operations
/// exist per concrete type (not generically) and whose orderings must be compile-time constants,
/// hence one small function per operation and type, each with a `barrier` branch. The fetch
/// functions return the value *before* the operation.
public protocol TKAtomicWord: FixedWidthInteger, AtomicRepresentable, Sendable {
    /// Loads `atomic`'s value, sequentially consistent.
    static func load(_ atomic: borrowing Atomic<Self>) -> Self
    /// Stores `value` into `atomic`, sequentially consistent.
    static func store(_ atomic: borrowing Atomic<Self>, _ value: Self)
    /// Replaces `expected` with `desired` if `atomic` holds `expected`; returns whether it did.
    /// `barrier: true` is sequentially consistent, `false` relaxed.
    static func compareExchange(_ atomic: borrowing Atomic<Self>, _ expected: Self, _ desired: Self, barrier: Bool) -> Bool
    /// Adds `operand` (wrapping) and returns the value *before* the addition; `barrier` as in `compareExchange`.
    static func fetchAdd(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    /// ORs `operand` in and returns the value *before* the operation; `barrier` as in `compareExchange`.
    static func fetchOr(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    /// ANDs `operand` in and returns the value *before* the operation; `barrier` as in `compareExchange`.
    static func fetchAnd(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
    /// XORs `operand` in and returns the value *before* the operation; `barrier` as in `compareExchange`.
    static func fetchXor(_ atomic: borrowing Atomic<Self>, _ operand: Self, barrier: Bool) -> Self
}

/// `Int32` as the atomic word of 32-bit values: each operation is one `Atomic<Int32>` call.
extension Int32: TKAtomicWord {
    /// Loads `a`, sequentially consistent (`Atomic.load`).
    @inlinable public static func load(_ a: borrowing Atomic<Int32>) -> Int32 { a.load(ordering: .sequentiallyConsistent) }
    /// Stores `v` into `a`, sequentially consistent (`Atomic.store`).
    @inlinable public static func store(_ a: borrowing Atomic<Int32>, _ v: Int32) { a.store(v, ordering: .sequentiallyConsistent) }
    /// `Atomic.compareExchange(expected:desired:)`: sequentially consistent with `barrier`, else relaxed; returns whether it exchanged.
    @inlinable public static func compareExchange(_ a: borrowing Atomic<Int32>, _ e: Int32, _ d: Int32, barrier: Bool) -> Bool {
        barrier
            ? a.compareExchange(expected: e, desired: d, ordering: .sequentiallyConsistent).exchanged
            : a.compareExchange(expected: e, desired: d, ordering: .relaxed).exchanged
    }
    /// `Atomic.wrappingAdd`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchAdd(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.wrappingAdd(v, ordering: .sequentiallyConsistent).oldValue : a.wrappingAdd(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseOr`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchOr(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseOr(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseOr(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseAnd`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchAnd(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseAnd(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseAnd(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseXor`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchXor(_ a: borrowing Atomic<Int32>, _ v: Int32, barrier: Bool) -> Int32 {
        barrier ? a.bitwiseXor(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseXor(v, ordering: .relaxed).oldValue
    }
}

/// `Int64` as the atomic word of 64-bit and pointer-sized values: each operation is one `Atomic<Int64>` call.
extension Int64: TKAtomicWord {
    /// Loads `a`, sequentially consistent (`Atomic.load`).
    @inlinable public static func load(_ a: borrowing Atomic<Int64>) -> Int64 { a.load(ordering: .sequentiallyConsistent) }
    /// Stores `v` into `a`, sequentially consistent (`Atomic.store`).
    @inlinable public static func store(_ a: borrowing Atomic<Int64>, _ v: Int64) { a.store(v, ordering: .sequentiallyConsistent) }
    /// `Atomic.compareExchange(expected:desired:)`: sequentially consistent with `barrier`, else relaxed; returns whether it exchanged.
    @inlinable public static func compareExchange(_ a: borrowing Atomic<Int64>, _ e: Int64, _ d: Int64, barrier: Bool) -> Bool {
        barrier
            ? a.compareExchange(expected: e, desired: d, ordering: .sequentiallyConsistent).exchanged
            : a.compareExchange(expected: e, desired: d, ordering: .relaxed).exchanged
    }
    /// `Atomic.wrappingAdd`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchAdd(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.wrappingAdd(v, ordering: .sequentiallyConsistent).oldValue : a.wrappingAdd(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseOr`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchOr(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseOr(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseOr(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseAnd`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchAnd(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseAnd(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseAnd(v, ordering: .relaxed).oldValue
    }
    /// `Atomic.bitwiseXor`, returning the old value: sequentially consistent with `barrier`, else relaxed.
    @inlinable public static func fetchXor(_ a: borrowing Atomic<Int64>, _ v: Int64, barrier: Bool) -> Int64 {
        barrier ? a.bitwiseXor(v, ordering: .sequentiallyConsistent).oldValue : a.bitwiseXor(v, ordering: .relaxed).oldValue
    }
}

/// A full memory barrier (OSMemoryBarrier): no load or store moves across it in either direction.
public func TKMemoryBarrier() {
    atomicMemoryFence(ordering: .sequentiallyConsistent)
}
