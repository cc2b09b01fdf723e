// OperationContext: per thread, which queue's token is running on this thread and which of its
// operations is inside `start()` right now. Read and written only by its own thread (a
// TKThreadLocal, made on first use). It answers `TKOperationQueue.current`, lets a synchronous
// operation's finish hand the queue's bookkeeping to the token that runs it (one queue-lock visit
// per operation instead of two), and lets waits detect that they would wait for themselves.

final class OperationContext {
    /// The queue whose token runs on this thread (nil outside tokens). Saved and restored by each
    /// token, so a token of another queue running nested on this thread is reported correctly.
    var queue: TKOperationQueue?
    /// The operation whose `runFromQueue()` is on this thread's stack. The token holds it.
    unowned(unsafe) var runningOperation: TKOperation?
    /// Set by `finishExecution` (right after the finishing CAS, before dependents are told) when
    /// `runningOperation` finishes on this thread before `start()` returned: the token then does
    /// the queue's bookkeeping itself and pops again, so an operation of this queue that the
    /// finish makes ready needs no new token (`pushReady`'s `callerWillLook`).
    var finishedInline = false

    private static let slot = TKThreadLocal<OperationContext>()

    /// The calling thread's context, made on first use.
    static var current: OperationContext {
        if let context = slot.value { return context }
        let context = OperationContext()
        slot.value = context
        return context
    }

    /// The calling thread's context if it has one (never makes one).
    static var existing: OperationContext? { slot.value }
}
