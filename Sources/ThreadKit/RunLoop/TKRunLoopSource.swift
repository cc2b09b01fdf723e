// TKRunLoopSource: a version-0 (custom) input source, CFRunLoopSource's role. Thread-safe:
// `signal` and `invalidate` from any thread; `perform` runs on the thread of a loop that has it
// in its current mode. `memberships` (the loops and modes it was added to) is guarded by its own
// lock, taken only while no loop lock is held (and released before `signal` takes a loop's lock
// to put the source on that loop's ready lists).
import Synchronization

// safety: immutable apart from the atomic flags and `memberships` (`Protected`).
/// A custom input source. Another thread calls `signal()` and then `wakeUp()` on the target loop;
/// the loop calls `perform` during its next pass in a mode that holds the source.
public final class TKRunLoopSource: @unchecked Sendable {
    /// Where the source performs among a pass's signalled sources: lower first, equal orders in
    /// the order they were added to the mode (CFRunLoopSourceGetOrder). Fixed at creation.
    public let order: Int
    let scheduleCallback: (@Sendable (TKRunLoop, TKRunLoop.Mode) -> Void)?
    let cancelCallback: (@Sendable (TKRunLoop, TKRunLoop.Mode) -> Void)?
    let performCallback: @Sendable () -> Void

    private let signalled = Atomic<Bool>(false)
    private let valid = Atomic<Bool>(true)
    let memberships = Protected<[RunLoopMembership]>([])

    /// Creates a version-0 source (CFRunLoopSourceCreate with a CFRunLoopSourceContext's
    /// schedule, cancel and perform callbacks). Nothing happens until it is added to a loop and
    /// signalled.
    ///
    /// `schedule` is called with the loop and mode each time the source joins a mode (an `add`, or
    /// a mode joining the common set it was added to), `cancel` each time it leaves one (`remove`
    /// or `invalidate()`); both run on the thread making that call, with no loop lock held.
    /// `perform` runs on a loop's thread during a pass of a mode holding the source, once per
    /// signal: signals that arrive before the pass coalesce into one perform, and a source in
    /// several loops or modes is performed by whichever pass takes the signal first.
    public init(
        order: Int = 0,
        schedule: (@Sendable (TKRunLoop, TKRunLoop.Mode) -> Void)? = nil,
        cancel: (@Sendable (TKRunLoop, TKRunLoop.Mode) -> Void)? = nil,
        perform: @escaping @Sendable () -> Void
    ) {
        self.order = order
        scheduleCallback = schedule
        cancelCallback = cancel
        performCallback = perform
    }

    /// Marks the source as ready to perform. Does not wake the loop: call `wakeUp()` on it.
    /// Releasing: pairs with the loop's acquiring exchange, so data prepared before signalling is
    /// visible to `perform`.
    ///
    /// The signal that sets the flag also puts the source on the ready list of each (loop, mode)
    /// it is in, so passes visit only signalled sources (ModeItems). A signal that finds the flag
    /// already set adds nothing: the source is on those lists since the signal that set it (a
    /// pass takes it off before consuming the flag), or joins them when added (`joined`).
    public func signal() {
        guard isValid, !signalled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // Read after the flag is set (see TKRunLoop.joined for the other side of this handshake).
        let targets = memberships.withLock { list in list.compactMap { m in m.loop.map { ($0, m.mode) } } }
        guard !targets.isEmpty else { return }
        if targets.count == 1 {
            targets[0].0.markReady(self, in: [targets[0].1])
            return
        }
        var byLoop: [ObjectIdentifier: (TKRunLoop, [TKRunLoop.Mode])] = [:]
        for (loop, mode) in targets { byLoop[ObjectIdentifier(loop), default: (loop, [])].1.append(mode) }
        for (loop, modes) in byLoop.values { loop.markReady(self, in: modes) }
    }

    /// Whether the source was signalled and no pass has taken the signal yet
    /// (CFRunLoopSourceIsSignalled). A pass clears it just before calling `perform`;
    /// `invalidate()` clears it for good. A snapshot: any thread may signal, and a loop may take
    /// the signal, at any moment.
    public var isSignaled: Bool { signalled.load(ordering: .acquiring) }

    /// Clears the signal; true if it was set (the loop then performs). Loop thread.
    func consumeSignal() -> Bool { signalled.exchange(false, ordering: .acquiringAndReleasing) }

    /// Removes the source from every loop and mode (calling `cancel` for each) and stops it for good.
    public func invalidate() {
        guard valid.exchange(false, ordering: .acquiringAndReleasing) else { return }
        signalled.store(false, ordering: .relaxed)
        for membership in memberships.withLock({ list in
            defer { list.removeAll() }
            return list
        }) {
            membership.loop?.detach(self, from: membership.mode)
        }
    }

    /// False once `invalidate()` was called (CFRunLoopSourceIsValid): an invalid source is never
    /// performed again, `signal()` on it does nothing, and adding it to a loop does nothing.
    /// Thread-safe.
    public var isValid: Bool { valid.load(ordering: .acquiring) }
}

/// One (loop, mode) pair an item was added to; the loop is weak so items do not keep loops alive.
struct RunLoopMembership {
    weak var loop: TKRunLoop?
    let mode: TKRunLoop.Mode
}
