// OperationState: the one atomic word of a TKOperation (docs/Operations.md, "The state word").
// Any thread reads it; every change is an atomic read-modify-write, so changes made by different
// threads (start, cancel, finish, a dependency resolving, a queue dispatching) are totally ordered
// on this word and each decision is taken on the value it replaces.

/// Named bits of `TKOperation.state`:
///
/// | bits  | name          | meaning                                                                  |
/// |-------|---------------|--------------------------------------------------------------------------|
/// | 0–1   | phase         | 0 pending (not started), 1 executing, 2 finished                         |
/// | 2     | cancelled     | `cancel()` was called (in any phase)                                     |
/// | 3     | resolved      | dependents have been told (at finish, or at a cancel before start)       |
/// | 4     | enqueued      | registered with its queue; `queue` is published (set once)               |
/// | 5     | dispatched    | handed to its queue's ready list (set once, by whoever sees it ready)    |
/// | 6     | startEntered  | `start()` began (a second call is a misuse)                              |
/// | 7     | hasDependents | another operation depends on this one: resolving takes the lock          |
/// | 8     | hasCompletion | a completion block is set: finishing takes the lock to take it           |
/// | 9     | hasWaiters    | a thread waits in `waitUntilFinished`: finishing sets the event          |
/// | 10    | done          | finished and the completion block has run: waiters may return            |
/// | 32–63 | count         | dependencies that were unresolved when added and are not resolved yet    |
///
/// Transitions of the phase: pending → executing (start, or the queue just before start) →
/// finished (finish), or pending → finished (cancelled before start). Nothing leaves finished.
/// `resolved` and `done` are set once and never cleared. The operation is ready when
/// `count == 0 || cancelled`.
///
/// Who may set what: `enqueued` by the adding queue (after registering the operation);
/// `dispatched` by `tryDispatch` (a CAS from a ready, enqueued, pending, undispatched value);
/// `resolved` while holding the operation's lock when `hasDependents` is set (so that an
/// `addDependency` racing with the resolution either sees it or is in its snapshot), else by the
/// finishing CAS; `hasDependents`, `hasCompletion`, `hasWaiters` only under the operation's lock.
enum OperationState {
    static let phaseMask: UInt64 = 0b11
    static let pending: UInt64 = 0
    static let executing: UInt64 = 1
    static let finished: UInt64 = 2
    static let cancelled: UInt64 = 1 << 2
    static let resolved: UInt64 = 1 << 3
    static let enqueued: UInt64 = 1 << 4
    static let dispatched: UInt64 = 1 << 5
    static let startEntered: UInt64 = 1 << 6
    static let hasDependents: UInt64 = 1 << 7
    static let hasCompletion: UInt64 = 1 << 8
    static let hasWaiters: UInt64 = 1 << 9
    static let done: UInt64 = 1 << 10
    static let countShift: UInt64 = 32
    static let countUnit: UInt64 = 1 << 32

    @inline(__always) static func phase(_ s: UInt64) -> UInt64 { s & phaseMask }
    @inline(__always) static func count(_ s: UInt64) -> UInt64 { s >> countShift }
    /// Every dependency resolved, or cancelled (a cancelled operation ignores its dependencies).
    @inline(__always) static func isReady(_ s: UInt64) -> Bool { count(s) == 0 || s & cancelled != 0 }
    /// May be handed to its queue's ready list now.
    @inline(__always) static func isDispatchable(_ s: UInt64) -> Bool {
        s & (enqueued | dispatched | phaseMask) == enqueued && isReady(s)
    }
}
