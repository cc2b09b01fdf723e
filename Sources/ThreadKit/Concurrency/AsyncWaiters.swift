// AsyncWaiters: the one mechanism under every `await` on a ThreadKit object (docs/Concurrency.md
// §4): a FIFO of suspended tasks behind a lock. A task suspends (an UnsafeContinuation) instead of
// blocking its thread; whoever makes the awaited event happen pops waiters under the lock and
// resumes them after releasing it. Finish events (threads, work items, operations) close the list
// for good (`close`), a group resumes everyone at each zero (`resumeAll`), a semaphore hands one
// unit to the first waiter (`popFirstLocked`), and the sequences' buffers hand one element to the
// first waiting `next()`.
//
// Owns: the list, its optional closing value, and every node's fields. Threads: any thread.
// `mutex` is a RawMutex. It guards this file's state and, by each owner's declaration, a little of
// the owner's own state that its hooks (`admit`, `withdraw`) and `withLock` bodies touch (the
// semaphore's debt, a buffer's elements). Lock order: the owner's hooks may take
// `PortInbox.mutex` under it (a port's messages), and the trace's registry (a leaf) may be taken
// under it when a resume is recorded; nothing else is taken while it is held, and no continuation
// is resumed while it is held (resuming can run the task inline on this thread).
//
// The trace (docs/DiagnosticsTrace.md §9): with the recorder on, a suspending task's id is kept in
// its node, and whichever thread takes the node out to resume it records `.taskResume` with that
// id; the exports draw a flow from there to the task's next job on a ThreadKit executor.
//
// Cancellation, in numbered steps (`suspend`):
// 1. A node is made in stage `arriving` and the cancellation handler installed. If the task is
//    already cancelled the runtime runs the handler at once, before step 2.
// 2. Under the mutex: a node the handler marked `cancelled` is withdrawn (the owner's `withdraw`
//    hook undoes what the caller claimed) and the task resumes throwing CancellationError; a
//    closed list or an `admit` hook that has a value resumes it at once; otherwise the node is
//    queued (stage `queued`).
// 3. The handler, under the mutex: a queued node is unlinked and withdrawn and resumes throwing; an
//    arriving node is marked `cancelled` (step 2 will see it); a resumed node is left alone (the
//    event won the race).
// Every node is resumed exactly once, by whichever of the event and the cancellation took it out
// of `queued` (or `arriving`) under the mutex first, and never stays in the list after either.

// safety: the list and every node's fields are touched only under `mutex`; each continuation
// is resumed once, by whoever takes its node out of the list under it.
/// A FIFO of tasks suspended until an event. `Value` is what a resumed waiter receives.
final class AsyncWaiters<Value: Sendable>: @unchecked Sendable {
    typealias Continuation = UnsafeContinuation<Value, any Error>

    // safety: every field is read and written only under the list's mutex.
    /// One task in `suspend`. Every field is guarded by the list's mutex.
    private final class Waiter: LinkedNode, @unchecked Sendable {
        enum Stage { case arriving, queued, cancelled, resumed }
        var stage = Stage.arriving
        /// The owner's ordering ticket, given when it was queued (see `suspend`'s `ticket`).
        var ticket: UInt64 = 0
        /// The suspended task's id when the trace was on as it suspended, else 0.
        var traceTask: UInt64 = 0
        var continuation: Continuation?
        var next: Waiter?
        /// Held strongly by its predecessor's `next` (or the list's `first`) while queued.
        unowned(unsafe) var previous: Waiter?
    }

    private let mutex = RawMutex()
    private var list = LinkedNodeList<Waiter>() // guarded by mutex
    /// Set by `close`, never cleared: later waiters get it at once.
    private var closedValue: Value? // guarded by mutex

    init() {}

    // MARK: Waiting

    /// Suspends the calling task until a `popFirstLocked`, `resumeAll` or `close` resumes it, or
    /// the task is cancelled (before or during the wait): then it throws CancellationError and
    /// leaves no node behind.
    ///
    /// Both hooks run with the mutex held. `admit`: a value to return at once instead of waiting
    /// (nil: wait). `withdraw`: runs once if the task leaves because of cancellation, to undo what
    /// the caller claimed before suspending (a semaphore's decrement). `ticket`: runs once, with
    /// the mutex held, as the task is queued; the owner's order among its own waiters of several
    /// kinds (`firstTicketLocked`).
    func suspend(
        admit: () -> Value? = { nil }, withdraw: @Sendable () -> Void = {},
        ticket: () -> UInt64 = { 0 }
    ) async throws -> Value {
        let waiter = Waiter()
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: Continuation) in
                let traceTask = DiagnosticsSwitch.isOn(.trace) ? TraceRecorder.currentTaskID() : 0
                let tid = mutex.lockInternal()
                if waiter.stage == .cancelled {
                    withdraw()
                    waiter.stage = .resumed
                    mutex.unlockInternal(tid)
                    continuation.resume(throwing: CancellationError())
                    return
                }
                if let value = closedValue ?? admit() {
                    waiter.stage = .resumed
                    mutex.unlockInternal(tid)
                    continuation.resume(returning: value)
                    return
                }
                waiter.continuation = continuation
                waiter.traceTask = traceTask
                waiter.ticket = ticket()
                waiter.stage = .queued
                append(waiter)
                mutex.unlockInternal(tid)
            }
        } onCancel: {
            let tid = mutex.lockInternal()
            switch waiter.stage {
            case .arriving:
                waiter.stage = .cancelled
                mutex.unlockInternal(tid)
            case .queued:
                unlink(waiter)
                withdraw()
                let continuation = take(waiter)
                mutex.unlockInternal(tid)
                continuation.resume(throwing: CancellationError())
            case .cancelled, .resumed:
                mutex.unlockInternal(tid)
            }
        }
    }

    /// As `suspend`, for events that carry no admission rule: returns at once once closed.
    func wait() async throws -> Value {
        try await suspend()
    }

    // MARK: Resuming

    /// Resumes every waiter with `value`; later waiters wait for the next resume. Returns how many.
    @discardableResult
    func resumeAll(returning value: Value) -> Int {
        let taken = withLock { takeAllLocked() }
        for continuation in taken { continuation.resume(returning: value) }
        return taken.count
    }

    /// Resumes every waiter with `value`, and every later `suspend` returns it at once (a
    /// one-shot event: a thread's or an operation's finish). Only the first close counts.
    func close(returning value: Value) {
        let taken = withLock { () -> [Continuation] in
            guard closedValue == nil else { return [] }
            closedValue = value
            return takeAllLocked()
        }
        for continuation in taken { continuation.resume(returning: value) }
    }

    /// Resumes the longest-waiting waiter with `value`; false if none waits.
    @discardableResult
    func resumeFirst(returning value: Value) -> Bool {
        guard let continuation = withLock({ popFirstLocked() }) else { return false }
        continuation.resume(returning: value)
        return true
    }

    // MARK: Owners' locked steps

    /// Runs `body` with the mutex held, for owners whose decisions must be atomic with the list
    /// (resume the continuations it returns only after it returns).
    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        try mutex.withLock(body)
    }

    /// Debug builds: stops the process unless the calling thread is inside `withLock` (for an
    /// owner's `…Locked` steps). Release builds: nothing.
    @inline(__always)
    func assertHeld(
        _ lock: StaticString, function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line
    ) {
        mutex.assertHeld(lock, function: function, file: file, line: line)
    }

    /// Takes the longest-waiting waiter out of the list. Mutex held; resume it after unlocking.
    func popFirstLocked() -> Continuation? {
        mutex.assertHeld("AsyncWaiters.mutex")
        guard let first = list.first else { return nil }
        unlink(first)
        return take(first)
    }

    /// The ticket of the longest-waiting waiter, nil if none waits. Mutex held.
    var firstTicketLocked: UInt64? {
        mutex.assertHeld("AsyncWaiters.mutex")
        return list.first?.ticket
    }

    /// Whether nobody waits. Mutex held.
    var isEmptyLocked: Bool {
        mutex.assertHeld("AsyncWaiters.mutex")
        return list.isEmpty
    }

    /// The number of tasks waiting now (tests use it to check that no waiter is left behind).
    var count: Int { withLock { list.count } }

    // MARK: The list (mutex held)

    private func takeAllLocked() -> [Continuation] {
        mutex.assertHeld("AsyncWaiters.mutex")
        var taken: [Continuation] = []
        taken.reserveCapacity(list.count)
        while let first = list.first {
            unlink(first)
            taken.append(take(first))
        }
        return taken
    }

    private func append(_ waiter: Waiter) { list.append(waiter) }

    private func unlink(_ waiter: Waiter) { list.remove(waiter) }

    /// Marks an unlinked waiter resumed and hands its continuation to the caller, who resumes it.
    private func take(_ waiter: Waiter) -> Continuation {
        if waiter.traceTask != 0 && DiagnosticsSwitch.isOn(.trace) { TraceRecorder.taskResumed(waiter.traceTask) }
        waiter.stage = .resumed
        defer { waiter.continuation = nil }
        return waiter.continuation!
    }
}
