// OperationEvent: a one-shot event many threads can wait for (`waitUntilFinished`). Made by the
// first waiter under the operation's lock, set once by the finishing thread. Waits go through
// `Parking`, so a pool worker waiting here is seen by the pool as blocked.

// safety: its only field is an atomic event word.
final class OperationEvent: @unchecked Sendable {
    /// The one event-word design (System/ParkingEvent.swift).
    private let event = ParkingEvent()

    /// Sets the event and wakes every waiter. Releasing: a waiter that returns sees everything
    /// the finishing thread did before (the completion block included). The setter holds a
    /// reference, so the word outlives the wake call.
    func set() { event.set() }

    /// Waits, parked through `Parking` (so the pool sees a blocked worker), until set.
    func wait() { _ = event.wait(spinLimit: DispatchSpin.longWait, observed: true, retryThreadStarts: true) }

    /// The operation layer's counter wait (a queue's `drained` sequence): a short spin, then parks
    /// through `Parking` while `word` holds `value`. Acquiring: pairs with the releasing store or bump that changes it.
    static func wait(on word: borrowing FutexWord, whileEqualTo value: UInt32) {
        var spin = SpinWait(limit: DispatchSpin.longWait)
        while word.pointer.pointee.load(ordering: .acquiring) == value {
            if spin.spin() { continue }
            _ = Parking.park(word, expected: value, retryThreadStarts: true)
        }
    }
}
