// TKPort: the abstract port of SPEC §4. This part holds only what run loops need to keep a port
// in a mode (a valid port keeps its mode non-empty); messages, delegates and the concrete
// TKMessagePort/TKSocketPort come with the ports section. Thread-safe.
import Synchronization

/// A communication endpoint a run loop can wait on (NSPort). Use the concrete kinds.
public class TKPort: @unchecked Sendable {
    private let valid = Atomic<Bool>(true)

    init() {}

    /// Makes the port unusable for good.
    public func invalidate() {
        valid.store(false, ordering: .releasing)
    }

    public var isValid: Bool { valid.load(ordering: .acquiring) }
}
