// TKJoinableThread: a joinable thread that hands a typed value to the threads that join it, as
// pthread_exit(value) and pthread_join(thread, &value) do, without `Any`. Thread-safe. `outcome`
// is written once by the thread itself (its body's return, or `exit(with:)`) before it ends, under
// its Protected lock; joiners read it after the end, which the join's acquiring wait orders after
// the write anyway.

// safety: adds an immutable body and a `Protected` outcome to TKThread.
/// A thread whose body returns a `Result` for the threads that join it (`joinValue()`), or ends
/// early with one (`TKJoinableThread<Result>.exit(with:)`, pthread_exit's counterpart). Joinable
/// from the start (`isDetached` is false, so the process waits for it at exit, as for any
/// joinable TKThread); any number of threads may join it, and join it again.
public final class TKJoinableThread<Result: Sendable>: TKThread, @unchecked Sendable {
    private let body: @Sendable () -> Result
    private let outcome = Protected<Result?>(nil)

    /// A joinable thread running `body`; start it with `start()`.
    public init(name: String? = nil, body: @escaping @Sendable () -> Result) {
        self.body = body
        super.init()
        self.name = name
        isDetached = false
    }

    /// Runs the body and keeps its value for the joiners. Never call directly.
    override public func main() {
        let value = body()
        outcome.withLock { $0 = value }
    }

    /// Waits until the thread has ended (as `join()`), then returns the value it ended with: its
    /// body's, or the one given to `exit(with:)`. Nil if it ended without one: through
    /// `TKThread.exit()`, or because the OS could not start it.
    public func joinValue() -> Result? {
        join()
        return outcome.current
    }

    /// As `joinValue()`, giving up at `deadline`: `.timedOut` if the thread had not ended by then.
    public func joinValue(until deadline: ContinuousClock.Instant) -> JoinResult {
        guard join(until: deadline) else { return .timedOut }
        return .ended(outcome.current)
    }

    /// What a join with a deadline found.
    public enum JoinResult: Sendable {
        /// The thread ended, with this value (nil: it ended without one).
        case ended(Result?)
        /// The deadline passed first.
        case timedOut
    }

    /// The value the thread ended with; nil while it runs, or if it ended without one.
    public var value: Result? {
        guard isEnded else { return nil }
        return outcome.current
    }

    /// pthread_exit(value): ends the calling thread, which must be a `TKJoinableThread<Result>`,
    /// handing `value` to its joiners (willExit is posted first, as for `TKThread.exit()`). Called
    /// on any other thread it is a misuse.
    public static func exit(with value: Result) -> Never {
        guard let thread = TKThread.current as? TKJoinableThread<Result> else {
            misuse(
                "TKJoinableThread<\(Result.self)>.exit(with:) called on TKThread \(TKThread.current.describe()), which is "
                    + "not a TKJoinableThread<\(Result.self)>: there is nobody to hand the value to. Fix: call it only from "
                    + "the body of a TKJoinableThread<\(Result.self)>, or use TKThread.exit().")
        }
        thread.outcome.withLock { $0 = value }
        TKThread.exit()
    }
}
