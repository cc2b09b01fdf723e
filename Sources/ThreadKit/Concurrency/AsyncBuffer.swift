// AsyncBuffer: the element queue behind the sequences of docs/Concurrency.md §4 that have a
// producer of their own (a notification observer's posts, a timer's fires). Producers `yield` from
// any thread; an iteration's `next()` takes the oldest element, or suspends on the buffer's
// AsyncWaiters until one is yielded. A port's `messages` needs no such buffer: the port's inbox is
// its queue (TKPort+Messages.swift).
//
// Owns: the elements, the terminated flag and the termination action, all guarded by the mutex of
// `waiters` (the one waiter list, Concurrency/AsyncWaiters.swift); nothing else is locked under it.
// The termination action (removing the observer, invalidating the timer) runs once, with no lock
// held, on whichever thread ends the iteration: the iterating task (cancelled, or done), or the
// thread that drops the iterator's last copy (`AsyncBufferLifetime`).

// safety: `elements`, `terminated` and `onTermination` are touched only under the waiters'
// mutex; `policy` and `waiters` are immutable.
/// A buffered, single-consumer stream of elements that ends when its consumer goes away.
final class AsyncBuffer<Element: Sendable>: @unchecked Sendable {
    enum Policy {
        /// Keeps every element until taken (notifications).
        case unbounded
        /// Keeps only the newest element not yet taken (a timer's fires: a slow consumer sees the
        /// latest fire, as a timer skips fires it missed).
        case newestOnly
    }

    private let policy: Policy
    /// Waiting `next()` calls, and the mutex that guards the fields below.
    private let waiters = AsyncWaiters<Element?>()
    private var elements = HeadArray<Element>() // guarded by waiters' mutex
    private var terminated = false // guarded by waiters' mutex
    private var onTermination: (@Sendable () -> Void)? // guarded by waiters' mutex; runs once

    init(policy: Policy) { self.policy = policy }

    /// Hands `element` to a waiting `next()`, or keeps it by the policy. Dropped once terminated.
    func yield(_ element: Element) {
        let waiter = waiters.withLock { () -> AsyncWaiters<Element?>.Continuation? in
            if terminated { return nil }
            if let waiter = waiters.popFirstLocked() { return waiter }
            switch policy {
            case .unbounded:
                break
            case .newestOnly:
                elements.removeAll(keepingCapacity: true)
            }
            elements.append(element)
            return nil
        }
        waiter?.resume(returning: element)
    }

    /// The oldest element; nil once terminated, or when the calling task is cancelled (which
    /// terminates the buffer).
    func next() async -> Element? {
        if Task.isCancelled {
            terminate()
            return nil
        }
        if let ready = waiters.withLock({ takeLocked() }) { return ready }
        do {
            return try await waiters.suspend(admit: { takeLocked() })
        } catch {
            terminate()
            return nil
        }
    }

    /// Sets the action that removes the producer's registration; runs at once if already ended.
    func setOnTermination(_ action: @escaping @Sendable () -> Void) {
        let runNow = waiters.withLock { () -> Bool in
            if terminated { return true }
            onTermination = action
            return false
        }
        if runNow { action() }
    }

    /// Ends the stream (once): drops what is buffered, ends waiting and later `next()` calls with
    /// nil, and runs the termination action.
    func terminate() {
        let action = waiters.withLock { () -> (@Sendable () -> Void)?? in
            if terminated { return nil }
            terminated = true
            elements.removeAll()
            defer { onTermination = nil }
            return .some(onTermination)
        }
        guard let action else { return }
        waiters.close(returning: nil)
        action?()
    }

    /// The number of `next()` calls waiting (tests).
    var waiterCount: Int { waiters.count }

    /// Elements buffered and not yet taken (tests).
    var bufferedCount: Int { waiters.withLock { elements.count } }

    /// Whether the stream has ended (tests).
    var isTerminated: Bool { waiters.withLock { terminated } }

    /// `.some(element)`, `.some(nil)` at the end, or nil: nothing yet. Mutex held.
    private func takeLocked() -> Element?? {
        waiters.assertHeld("the mutex of AsyncBuffer.waiters")
        if let element = elements.popFirst() { return .some(element) }
        return terminated ? .some(nil) : nil
    }
}

/// Ends an iteration when the last copy of its iterator (or sequence) is dropped: the reference
/// an iterator holds so that a consumer that stops calling `next()` removes the registration.
final class AsyncBufferLifetime<Element: Sendable>: Sendable {
    let buffer: AsyncBuffer<Element>

    init(_ buffer: AsyncBuffer<Element>) { self.buffer = buffer }

    deinit { buffer.terminate() }
}
