// ParkingEvent: the one event-word design of ThreadKit: a one-shot (resettable) event on a futex
// word. Used for a thread's start and finish (join), a pool worker's idle sleep, a sync caller
// waiting for its drainer, a concurrentPerform caller, and waiters of a work item or operation.
// Any number of threads may wait (set wakes them all); any thread sets it.

// safety: an atomic word, owned by this ~Copyable value and freed with it.
/// | word | meaning                                   |
/// |------|-------------------------------------------|
/// | 0    | not set, the waiter is not asleep          |
/// | 1    | set                                        |
/// | 2    | not set, the waiter is (about to be) asleep |
///
/// `set` costs a futex wake only when the waiter had gone to sleep (2): a waiter first spins,
/// and most sets land while it spins.
struct ParkingEvent: ~Copyable, @unchecked Sendable {
    private let word = FutexWord(0)

    init() {}

    /// Back to "not set". Only the waiter, while no setter can be racing (the setter that will
    /// set it is chosen later, under a lock both take).
    func reset() { word.pointer.pointee.store(0, ordering: .relaxed) }

    var isSet: Bool { word.pointer.pointee.load(ordering: .acquiring) == 1 }

    /// Sets the event and wakes the waiters if any sleeps. Releasing: publishes what the setter did
    /// before to the waiter, whose acquiring loads pair with it.
    func set() {
        if word.pointer.pointee.exchange(1, ordering: .releasing) == 2 {
            SystemCall.futexWake(word.address, count: Int32.max)
        }
    }

    /// Waits until set (true) or `deadline` passes (false; never early). `observed`: sleep through
    /// `Parking` (a user-visible wait the pool must know about) or directly (the pool's own idle
    /// sleep, which must not count as a blocked worker).
    /// `retryThreadStarts`: see `Parking.park` (observed waits only).
    func wait(deadline: ContinuousClock.Instant? = nil, spinLimit: Int, observed: Bool, retryThreadStarts: Bool = false) -> Bool {
        let atomic = word.pointer
        var spin = SpinWait(limit: spinLimit)
        while spin.spin() {
            if atomic.pointee.load(ordering: .acquiring) == 1 { return true }
        }
        while true {
            let state = atomic.pointee.load(ordering: .acquiring)
            if state == 1 { return true }
            if state == 0, !atomic.pointee.compareExchange(expected: 0, desired: 2, ordering: .acquiring).exchanged { continue }
            if observed {
                if !Parking.park(word, expected: 2, deadline: deadline, retryThreadStarts: retryThreadStarts) {
                    return atomic.pointee.load(ordering: .acquiring) == 1
                }
            } else {
                var timeout: Duration? = nil
                if let deadline {
                    timeout = deadline - ContinuousClock.now
                    if timeout! <= .zero { return atomic.pointee.load(ordering: .acquiring) == 1 }
                }
                _ = SystemCall.futexWait(word.address, expected: 2, timeout: timeout)
            }
        }
    }
}
