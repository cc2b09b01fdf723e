// OperationEvent: a one-shot event many threads can wait for (`waitUntilFinished`). Made by the
// first waiter under the operation's lock, set once by the finishing thread. Waits go through
// `Parking`, so a pool worker waiting here is seen by the pool as blocked.

/// | word | meaning  |
/// |------|----------|
/// | 0    | not set  |
/// | 1    | set      |
final class OperationEvent: @unchecked Sendable {
    private let word = FutexWord(0)

    deinit { word.deallocate() }

    /// Sets the event and wakes every waiter. Releasing: pairs with the acquiring loads in `wait`,
    /// so a waiter that returns sees everything the finishing thread did before (the completion
    /// block included). The setter holds a reference, so the word outlives the wake call.
    func set() {
        word.pointer.pointee.store(1, ordering: .releasing)
        Parking.unparkAll(word)
    }

    func wait() { OperationEvent.wait(on: word, whileEqualTo: 0) }

    /// The operation layer's one blocking loop: a short spin, then parks through `Parking` while
    /// `word` holds `value`. Acquiring: pairs with the releasing store or bump that changes it.
    static func wait(on word: FutexWord, whileEqualTo value: UInt32) {
        var spin = SpinWait(limit: DispatchSpin.longWait)
        while word.pointer.pointee.load(ordering: .acquiring) == value {
            if spin.spin() { continue }
            _ = Parking.park(word, expected: value)
        }
    }
}
