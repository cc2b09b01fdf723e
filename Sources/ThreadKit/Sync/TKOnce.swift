// TKOnce: dispatch_once / pthread_once. Thread-safe; the first caller runs the body, concurrent
// callers park until it has finished, later callers return after one acquiring load.
import Synchronization

/// Runs a body exactly once, however many threads call `run` (dispatch_once). Callers that
/// arrive while the body runs wait for it to finish. Calling `run` on the same once from inside its
/// own body is a deadlock and stops the process with a message.
public struct TKOnce: ~Copyable, Sendable {
    private let state = OnceState()

    /// Creates a once whose body has not run.
    public init() {}

    /// Runs `body` if no call has run a body on this once yet, like `dispatch_once`; otherwise
    /// waits until that body has finished and returns without running `body`. On return the
    /// first body's effects are visible to the caller. Re-entering from inside the body stops the
    /// process with a message.
    public borrowing func run(_ body: () -> Void) {
        // Acquiring: pairs with the releasing store of `done`, so the body's effects are visible.
        if state.word.pointer.pointee.load(ordering: .acquiring) == OnceState.done { return }
        state.runSlow(body)
    }
}

// safety: its only field is an atomic futex word.
/// The once's word, on the heap so that its address is stable for parking even though TKOnce is
/// a value: 0 never run, `done` finished, otherwise the running thread's id with `waitersBit`
/// set once another thread parks.
final class OnceState: @unchecked Sendable {
    static let done: UInt32 = 0x7FFF_FFFF // no thread id is this large (ids fit in 22 bits)
    static let waitersBit: UInt32 = 0x8000_0000

    let word = FutexWord(0)

    func runSlow(_ body: () -> Void) {
        let tid = SystemCall.currentThreadID
        let atomic = word.pointer
        while true {
            let s = atomic.pointee.load(ordering: .acquiring)
            if s == OnceState.done { return }
            if s == 0 {
                guard atomic.pointee.compareExchange(expected: 0, desired: tid, ordering: .acquiring).exchanged else { continue }
                body()
                // Releasing: publishes the body's effects to every caller that sees `done`.
                let previous = atomic.pointee.exchange(OnceState.done, ordering: .releasing)
                if previous & OnceState.waitersBit != 0 { Parking.unparkAll(word) }
                return
            }
            if s & ~OnceState.waitersBit == tid {
                misuse(
                    "TKOnce.run called again from inside its own body on thread \(tid): this would deadlock. "
                        + "Fix: do not re-enter the once from the code it runs.")
            }
            let parked = s | OnceState.waitersBit
            if s != parked, !atomic.pointee.compareExchange(expected: s, desired: parked, ordering: .relaxed).exchanged { continue }
            _ = Parking.park(word, expected: parked)
        }
    }
}
