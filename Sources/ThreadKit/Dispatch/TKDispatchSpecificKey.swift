// TKDispatchSpecificKey: DispatchSpecificKey (SPEC §6). Immutable; each key has a process-unique
// id (not its address, which a later key could reuse after this one is freed).
import Synchronization

public final class TKDispatchSpecificKey<T: Sendable>: Sendable {
    let id: UInt64

    public init() {
        id = specificKeyCounter.wrappingAdd(1, ordering: .relaxed).newValue
    }
}

/// Relaxed: only uniqueness matters.
private let specificKeyCounter = Atomic<UInt64>(0)
