// TKTimer: NSTimer/CFRunLoopTimer with ContinuousClock deadlines. Thread-safe. `state` (fire date,
// tolerance, validity, the one loop and the modes it is in, generation) is guarded by the timer's
// own lock; a loop may read it while holding its loop lock (lock order: loop lock, then timer).
// The block runs on the loop's thread.
import Synchronization

// safety: the mutable state is a `Protected`; the rest is immutable.
/// A timer that fires its block on a run loop: never early, at most `tolerance` late when the loop
/// is free, and — when repeating — on its original schedule: fires missed while the loop was busy
/// are skipped, not caught up.
public final class TKTimer: @unchecked Sendable {
    struct State {
        var fireDate: ContinuousClock.Instant
        var tolerance: Duration = .zero
        var valid = true
        /// Bumped whenever the fire date changes; heap entries of older generations are dead.
        var generation: UInt64 = 0
        weak var loop: TKRunLoop?
        var modes: Set<TKRunLoop.Mode> = []
    }

    /// A repeating timer fires every `interval`. Repeating intervals below 0.1 ms (including zero
    /// and negative ones) become 0.1 ms, as in Foundation. A non-repeating timer reports zero
    /// whatever interval it was created with, as NSTimer's `timeInterval` does.
    public let interval: Duration
    let repeats: Bool
    /// What the creator handed the timer for its block to read (NSTimer's `userInfo`). Immutable.
    public let userInfo: (any Sendable)?
    let block: @Sendable (TKTimer) -> Void
    let state: Protected<State>

    /// Creates a timer that fires first at `date` and then, if `repeats`, every `interval` on
    /// that schedule (NSTimer's `init(fire:interval:repeats:block:)`,
    /// CFRunLoopTimerCreateWithHandler). It does nothing until added to a loop with
    /// `TKRunLoop.add(_:forMode:)`; a `date` already past fires as soon as the loop runs a mode
    /// holding the timer.
    ///
    /// The block runs on that loop's thread, with no loop lock held, and gets the timer (to read
    /// `userInfo` or to invalidate it). Repeating intervals below 0.1 ms become 0.1 ms; a
    /// non-repeating timer's `interval` reads 0. A timer belongs to one loop: adding it to a
    /// second one stops the process with a message.
    public init(
        fireAt date: ContinuousClock.Instant, interval: Duration, repeats: Bool, userInfo: (any Sendable)? = nil,
        block: @escaping @Sendable (TKTimer) -> Void
    ) {
        self.interval = repeats ? max(interval, .microseconds(100)) : .zero
        self.repeats = repeats
        self.userInfo = userInfo
        self.block = block
        state = Protected(State(fireDate: date))
    }

    /// Creates a timer that fires first `interval` from now (a negative one counts as zero), as
    /// `init(fireAt:interval:repeats:userInfo:block:)` describes (NSTimer's
    /// `init(timeInterval:repeats:block:)`). Add it to a loop to start it;
    /// `scheduledTimer(withInterval:repeats:userInfo:block:)` does both.
    public convenience init(
        interval: Duration, repeats: Bool, userInfo: (any Sendable)? = nil,
        block: @escaping @Sendable (TKTimer) -> Void
    ) {
        self.init(fireAt: .now + max(interval, .zero), interval: interval, repeats: repeats, userInfo: userInfo, block: block)
    }

    /// Creates a timer and adds it to the current thread's run loop in the default mode.
    @discardableResult
    public static func scheduledTimer(
        withInterval interval: Duration, repeats: Bool, userInfo: (any Sendable)? = nil,
        block: @escaping @Sendable (TKTimer) -> Void
    ) -> TKTimer {
        let timer = TKTimer(interval: interval, repeats: repeats, userInfo: userInfo, block: block)
        TKRunLoop.current.add(timer, forMode: .default)
        return timer
    }

    /// When the timer fires next. Setting it reschedules the timer on its loop.
    public var fireDate: ContinuousClock.Instant {
        get { state.current.fireDate }
        set {
            let loop = state.withLock { s -> TKRunLoop? in
                s.fireDate = newValue
                s.generation &+= 1
                return s.loop
            }
            loop?.reschedule(self)
        }
    }

    /// How late the timer may fire so the loop can serve several timers with one wakeup. Default 0.
    public var tolerance: Duration {
        get { state.current.tolerance }
        set { state.withLock { $0.tolerance = max(newValue, .zero) } }
    }

    /// Runs the block now, on the calling thread. A repeating timer keeps its schedule; a
    /// non-repeating one is invalidated afterwards.
    public func fire() {
        guard isValid else { return }
        block(self)
        if !repeats { invalidate() }
    }

    /// Stops the timer for good and removes it from its loop.
    public func invalidate() {
        let (loop, modes) = state.withLock { s -> (TKRunLoop?, Set<TKRunLoop.Mode>) in
            guard s.valid else { return (nil, []) }
            s.valid = false
            defer { s.modes = [] }
            return (s.loop, s.modes)
        }
        for mode in modes { loop?.detach(self, from: mode) }
    }

    /// False once the timer was invalidated: by `invalidate()`, or after a non-repeating timer
    /// fired (NSTimer's `isValid`). An invalid timer never fires again and adding it to a loop
    /// does nothing. Thread-safe.
    public var isValid: Bool { state.current.valid }

    /// After a fire at the loop: the next slot of the original schedule strictly after `now`
    /// (missed slots are skipped), or invalidation for a one-shot timer. Returns the loop to
    /// reschedule on, if any.
    func advance(after now: ContinuousClock.Instant) -> TKRunLoop? {
        guard repeats else {
            invalidate()
            return nil
        }
        return state.withLock { s -> TKRunLoop? in
            guard s.valid else { return nil }
            // Exact and saturating: a fire date Int.max intervals ago must not trap.
            s.fireDate = RepeatingSchedule.advance(start: s.fireDate, interval: interval, now: now).next
            s.generation &+= 1
            return s.loop
        }
    }
}
