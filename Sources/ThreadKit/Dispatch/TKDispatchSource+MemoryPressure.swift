// TKDispatchSource+MemoryPressure: memory-pressure sources (DispatchSource.makeMemoryPressureSource)
// over Linux's pressure stall information (PSI, /proc/pressure/memory). Two triggers, each its own
// descriptor opened when the source is made (state.ownedFDs) and watched for EPOLLPRI by the
// manager:
//
// | level       | trigger (within any 2 s window)                                               |
// |-------------|-------------------------------------------------------------------------------|
// | `.warning`  | "some 200000 2000000": some task stalled on memory for 200 ms (10%)           |
// | `.critical` | "full 200000 2000000": every runnable task stalled on memory for 200 ms       |
// | `.normal`   | neither trigger fired for `hold` (4 s) after an elevated level                 |
//
// A trigger fires at most once per window while its threshold is exceeded; the level is the
// highest one whose trigger fired within `hold`, re-checked by a manager timer while elevated.
// The handler gets the new level (`data`, set not or-ed) when it changes and is in the mask.
// 2 s windows are what an unprivileged process may ask for (Linux 6.5+: multiples of 2 s).
// `state.pressure` is guarded by the source's lock.
import Glibc

extension TKDispatchSource {
    /// Memory-pressure levels (DispatchSource.MemoryPressureEvent). `data` of such a source is
    /// the level now: `MemoryPressureEvent(rawValue: source.data)`.
    public struct MemoryPressureEvent: OptionSet, Sendable, Hashable {
        /// The bits of the set: `normal` 0x1, `warning` 0x2, `critical` 0x4 (libdispatch's values).
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`, such as a source's `data`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Pressure is back to normal: neither trigger fired for 4 s after an elevated level.
        public static let normal = MemoryPressureEvent(rawValue: 0x1)
        /// Some task stalled on memory for 200 ms within a 2 s window (PSI "some").
        public static let warning = MemoryPressureEvent(rawValue: 0x2)
        /// Every runnable task stalled on memory for 200 ms within a 2 s window (PSI "full").
        public static let critical = MemoryPressureEvent(rawValue: 0x4)
        /// All three levels.
        public static let all: MemoryPressureEvent = [.normal, .warning, .critical]
    }

    struct PressureState {
        var level = MemoryPressureEvent.normal
        var lastWarning: ContinuousClock.Instant?
        var lastCritical: ContinuousClock.Instant?
        var recheckScheduled = false
        /// The descriptors of the two triggers (-1: not opened for this mask).
        var warningFD: Int32 = -1
        var criticalFD: Int32 = -1
        /// How long a level holds after its trigger last fired.
        var hold: Duration = .seconds(4)
    }

    static let pressurePath = "/proc/pressure/memory"

    /// A source for the system's memory pressure (`.normal`, `.warning`, `.critical`), delivered
    /// on `queue`. Throws `TKError`: `.invalidArgument` for an empty mask; `.systemCall` when PSI
    /// is unavailable (a kernel without CONFIG_PSI, or booted with psi=0: /proc/pressure/memory is
    /// missing or refuses triggers), naming what was refused.
    public static func makeMemoryPressureSource(eventMask: MemoryPressureEvent, queue: TKDispatchQueue) throws -> TKDispatchSource {
        try makeMemoryPressureSource(eventMask: eventMask, queue: queue, hold: .seconds(4))
    }

    /// As the public factory, with the time a level holds after its trigger last fired (tests).
    static func makeMemoryPressureSource(eventMask: MemoryPressureEvent, queue: TKDispatchQueue, hold: Duration) throws -> TKDispatchSource
    {
        let call = "TKDispatchSource.makeMemoryPressureSource(eventMask: 0x\(String(eventMask.rawValue, radix: 16)))"
        guard !eventMask.isEmpty, eventMask.isSubset(of: .all) else {
            throw TKError(.invalidArgument, "\(call): the mask names no level. Fix: pass some of .normal, .warning, .critical.")
        }
        let source = TKDispatchSource(kind: .memoryPressure, queue: queue, eventMask: eventMask.rawValue)
        source.state.pressure.hold = hold
        // .normal alone still needs the triggers: it is the end of an elevated level.
        let warning = try openTrigger("some 200000 2000000", call)
        source.state.ownedFDs.append(warning)
        source.state.pressure.warningFD = warning
        if eventMask.contains(.critical) || eventMask.contains(.normal) {
            let critical = try openTrigger("full 200000 2000000", call)
            source.state.ownedFDs.append(critical)
            source.state.pressure.criticalFD = critical
        }
        return source
    }

    private static func openTrigger(_ spec: String, _ call: String) throws -> Int32 {
        let fd = open(pressurePath, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw TKError.systemCall(
                "open(\(pressurePath))", errno: errno,
                "\(call): Linux's pressure stall information (PSI) is unavailable (a kernel "
                    + "without CONFIG_PSI, or booted with psi=0), and memory-pressure sources need it")
        }
        let written = spec.withCString { write(fd, $0, strlen($0) + 1) }
        guard written > 0 else {
            let error = errno
            close(fd)
            throw TKError.systemCall(
                "write(\(pressurePath), \"\(spec)\")", errno: error,
                "\(call): the kernel refuses a PSI trigger (EPERM/EINVAL: unprivileged triggers need "
                    + "Linux 6.5 or later)")
        }
        return fd
    }

    /// Caller holds lock (activation).
    func registerMemoryPressureLocked() -> AfterRegistering {
        lock.assertHeld("TKDispatchSource.lock")
        for fd in state.ownedFDs {
            let error = DispatchManager.shared.watchOwned(fd, events: EventPoll.pollPri, source: self)
            if error != 0 { return .refused(error) }
        }
        return .nothing
    }

    /// A trigger descriptor is ready (manager thread, no lock held).
    func pressureTriggered(fd: Int32, events: UInt32) {
        guard events & EventPoll.pollPri != 0 else { return } // POLLERR: the trigger is gone
        let critical = lock.withLock { fd == state.pressure.criticalFD }
        pressureTriggered(critical: critical)
    }

    /// A trigger fired (or a test says one did): move to the level it implies and keep checking
    /// until the level falls back to normal.
    func pressureTriggered(critical: Bool) {
        lock.lock()
        guard state.lifecycle == .active else { return lock.unlock() }
        let now = ContinuousClock.now
        if critical { state.pressure.lastCritical = now } else { state.pressure.lastWarning = now }
        let changed = updatePressureLevelLocked(now)
        let recheck = scheduleRecheckLocked(now)
        lock.unlock()
        if let recheck { DispatchManager.shared.schedule(at: recheck) { [self] in pressureRecheck() } }
        if let changed { merge(changed) }
    }

    private func pressureRecheck() {
        lock.lock()
        state.pressure.recheckScheduled = false
        guard state.lifecycle == .active else { return lock.unlock() }
        let now = ContinuousClock.now
        let changed = updatePressureLevelLocked(now)
        let recheck = scheduleRecheckLocked(now)
        lock.unlock()
        if let recheck { DispatchManager.shared.schedule(at: recheck) { [self] in pressureRecheck() } }
        if let changed { merge(changed) }
    }

    /// Recomputes the level; returns it if it changed and the mask asks for it. Caller holds lock.
    private func updatePressureLevelLocked(_ now: ContinuousClock.Instant) -> UInt? {
        lock.assertHeld("TKDispatchSource.lock")
        let p = state.pressure
        let level: MemoryPressureEvent =
            if let t = p.lastCritical, now - t < p.hold { .critical } else if let t = p.lastWarning, now - t < p.hold { .warning } else {
                .normal
            }
        guard level != p.level else { return nil }
        state.pressure.level = level
        return eventMask & level.rawValue != 0 ? level.rawValue : nil
    }

    /// When to look again (while elevated and no check is pending). Caller holds lock.
    private func scheduleRecheckLocked(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        lock.assertHeld("TKDispatchSource.lock")
        guard state.pressure.level != .normal, !state.pressure.recheckScheduled else { return nil }
        state.pressure.recheckScheduled = true
        // When the current level's trigger expires (a critical level may fall to warning first).
        let last = (state.pressure.level == .critical ? state.pressure.lastCritical : state.pressure.lastWarning) ?? now
        return max(last + state.pressure.hold, now + .milliseconds(1))
    }
}
