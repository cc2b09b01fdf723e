// TKTimer+Fires: a repeating timer as an AsyncSequence of fire instants (docs/Concurrency.md §4).
//
// Owns: for each iteration, one TKTimer and one AsyncBuffer. The timer's block runs on the loop's
// thread and yields into the buffer; the iterating task takes from it. The timer is scheduled
// when the iteration begins (`makeAsyncIterator`) and invalidated, from whichever thread ends the
// iteration, when it ends: the task is cancelled, or the iterator's last copy is dropped (a
// `break`). Locks: the buffer's (a leaf) on both sides; the timer's and the loop's only in
// scheduling and invalidation, never under the buffer's.

extension TKTimer {
    /// A repeating timer on `loop` in `modes`, as a sequence of the instants at which it fires.
    /// Each iteration schedules its own timer, the first fire `interval` after the iteration
    /// begins; the loop's thread must run its loop in one of `modes` for fires to happen. Fires are
    /// never early (each instant is at least the scheduled fire date) and keep the original
    /// schedule. A consumer slower than the timer gets only the newest fire it missed (a timer skips
    /// missed fires; so does the sequence). The timer is invalidated when the iteration ends: on
    /// `break`, on cancellation of the iterating task (`next()` then returns nil), or when the
    /// iterator is dropped. Intervals below 0.1 ms become 0.1 ms, as for every repeating timer.
    public static func fires(
        every interval: Duration, tolerance: Duration = .zero, on loop: TKRunLoop,
        forModes modes: [TKRunLoop.Mode] = [.common]
    ) -> Fires {
        Fires(interval: interval, tolerance: tolerance, loop: loop, modes: modes)
    }

    /// The fire instants of a repeating timer. See `TKTimer.fires(every:tolerance:on:forModes:)`.
    public struct Fires: AsyncSequence, Sendable {
        /// The instant the timer's block ran on the loop's thread: never before the scheduled
        /// fire date.
        public typealias Element = ContinuousClock.Instant
        /// The sequence never throws: cancelling the iterating task ends it (`next()` returns nil).
        public typealias Failure = Never

        let interval: Duration
        let tolerance: Duration
        let loop: TKRunLoop
        let modes: [TKRunLoop.Mode]

        /// Schedules this iteration's timer.
        public func makeAsyncIterator() -> Iterator {
            let buffer = AsyncBuffer<ContinuousClock.Instant>(policy: .newestOnly)
            let timer = TKTimer(interval: interval, repeats: true) { _ in
                buffer.yield(.now)
            }
            timer.tolerance = tolerance
            // The buffer holds the timer (through this action) and the timer's block holds the
            // buffer: the cycle ends when the iteration does.
            buffer.setOnTermination { timer.invalidate() }
            for mode in modes { loop.add(timer, forMode: mode) }
            return Iterator(lifetime: AsyncBufferLifetime(buffer), timer: timer)
        }

        /// One iteration: it owns the iteration's timer, which is invalidated when the iteration
        /// ends (the task is cancelled, or the iterator's last copy is dropped). Iterate from one
        /// task at a time.
        public struct Iterator: AsyncIteratorProtocol, Sendable {
            let lifetime: AsyncBufferLifetime<ContinuousClock.Instant>
            /// This iteration's timer (tests check that it is invalidated at the end).
            let timer: TKTimer

            /// The instant of the next fire (the newest one, if several happened since the last
            /// call); nil once the iteration was cancelled.
            public mutating func next() async -> ContinuousClock.Instant? {
                await lifetime.buffer.next()
            }
        }
    }
}
