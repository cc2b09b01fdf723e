// TKDispatchSpecificKey: DispatchSpecificKey (SPEC §6). Immutable; each key has a process-unique
// id (not its address, which a later key could reuse after this one is freed).
import Synchronization

/// A key for values attached to a queue with `TKDispatchQueue.setSpecific(key:value:)`, like
/// `DispatchSpecificKey`. Keys compare by identity: each key made is distinct, and a freed key's
/// slot is never reused by a later one. Immutable and thread-safe.
public final class TKDispatchSpecificKey<T: Sendable>: Sendable {
    let id: UInt64

    /// Creates a new key, distinct from every other key in the process.
    public init() {
        id = specificKeyCounter.wrappingAdd(1, ordering: .relaxed).newValue
    }
}

/// Relaxed: only uniqueness matters.
private let specificKeyCounter = Atomic<UInt64>(0)
