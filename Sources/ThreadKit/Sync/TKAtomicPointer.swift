// TKAtomicPointer: OSAtomicCompareAndSwapPtr's object form, a pointer that threads load, store and
// compare-and-swap atomically. Thread-safe; the orderings are TKAtomic's (`barrier: true`
// sequentially consistent, `false` relaxed). The pointee is the caller's business: the atomic
// orders the pointer only (publish with `barrier: true`, as with OSAtomic's Barrier variants).
import Synchronization

// safety: its only field is an `Atomic`.
/// An atomic pointer: `TKAtomicPointer<UnsafeMutableRawPointer>` for `void *`,
/// `TKAtomicPointer<UnsafeMutablePointer<Node>>` for a typed one (a lock-free stack's head).
/// It holds an optional, so nil is a value like any other (NULL in OSAtomic). Any pointer-sized
/// type whose nil fits the same word qualifies (the pointer types, `Unmanaged`, `OpaquePointer`).
public final class TKAtomicPointer<Pointer: AtomicOptionalRepresentable>: @unchecked Sendable
where Pointer.AtomicOptionalRepresentation == Int.AtomicRepresentation {
    @usableFromInline let storage: Atomic<Pointer?>

    /// Creates an atomic pointer holding `pointer` (nil for NULL).
    public init(_ pointer: Pointer?) { storage = Atomic(pointer) }

    /// Returns the pointer (a sequentially consistent load).
    @inlinable public func load() -> Pointer? { storage.load(ordering: .sequentiallyConsistent) }
    /// Replaces the pointer (a sequentially consistent store: it publishes what was written
    /// through it before).
    @inlinable public func store(_ pointer: Pointer?) { storage.store(pointer, ordering: .sequentiallyConsistent) }

    /// Replaces the pointer with `desired` if it is `expected`; true if it did (OSAtomicCompareAndSwapPtr).
    @inlinable
    public func compareAndSwap(expected: Pointer?, desired: Pointer?, barrier: Bool = true) -> Bool {
        barrier
            ? storage.compareExchange(expected: expected, desired: desired, ordering: .sequentiallyConsistent).exchanged
            : storage.compareExchange(expected: expected, desired: desired, ordering: .relaxed).exchanged
    }
}
