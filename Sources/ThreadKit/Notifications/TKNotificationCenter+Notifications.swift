// TKNotificationCenter+Notifications: the notifications of one name (and sender) as an
// AsyncSequence (docs/Concurrency.md §4), as Foundation's NotificationCenter.notifications(named:
// object:).
//
// Owns: one observer of the center and one unbounded AsyncBuffer per call. The observer's block
// runs on each posting thread and yields into the buffer (its mutex, a leaf, is the only lock it
// takes); the iterating task takes from it. The observer is removed, on whichever thread ends the
// iteration, when the iteration ends (cancelled, `break`, iterator dropped) or when the sequence
// and all its iterators are dropped without iterating. The center's registry lock is taken only by
// addObserver and removeObserver, never under the buffer's mutex.

extension TKNotificationCenter {
    /// The notifications named `name` (nil: every name) from `object` (nil: any sender) posted on
    /// this center from now on, in the order they were posted (from one thread; posts racing on
    /// several threads in the order they reached the buffer). The observer is registered by this
    /// call, so posts made before the iteration begins are kept; the buffer is unbounded. One
    /// iteration per sequence: the observer is removed when it ends (`break`, cancellation of the
    /// iterating task, the iterator dropped), and a second iteration ends at once.
    public func notifications(named name: TKNotification.Name?, object: AnyObject? = nil) -> Notifications {
        let buffer = AsyncBuffer<TKNotification>(policy: .unbounded)
        let token = addObserver(forName: name, object: object) { notification in buffer.yield(notification) }
        // The center holds the block, the block the buffer, the buffer this action: the cycle ends
        // when the observer is removed.
        buffer.setOnTermination { [weak self] in self?.removeObserver(token) }
        return Notifications(lifetime: AsyncBufferLifetime(buffer))
    }

    /// Notifications from one observer registration. See `notifications(named:object:)`.
    public struct Notifications: AsyncSequence, Sendable {
        /// Each element is one posted notification that matched the registration.
        public typealias Element = TKNotification
        /// Iteration never throws; it ends (nil) when the iterating task is cancelled.
        public typealias Failure = Never

        /// Shared by the sequence's copies and its iterator: removes the observer when all are gone.
        let lifetime: AsyncBufferLifetime<TKNotification>

        /// An iterator over the notifications posted from now on. Notifications are buffered
        /// (unbounded) until it takes them; when the sequence and its iterators are all gone, the
        /// observer is removed.
        public func makeAsyncIterator() -> Iterator {
            Iterator(sequence: lifetime, iteration: AsyncBufferLifetime(lifetime.buffer))
        }

        /// Hands out the buffered notifications in order, waiting for a post when none is buffered.
        public struct Iterator: AsyncIteratorProtocol, Sendable {
            let sequence: AsyncBufferLifetime<TKNotification>
            /// This iterator's own: dropping the iterator ends the iteration even while the sequence
            /// value is still around.
            let iteration: AsyncBufferLifetime<TKNotification>

            /// The next notification, waiting for a post if none is buffered; nil once the iteration
            /// ended (the iterating task was cancelled).
            public mutating func next() async -> TKNotification? {
                await iteration.buffer.next()
            }
        }
    }
}
