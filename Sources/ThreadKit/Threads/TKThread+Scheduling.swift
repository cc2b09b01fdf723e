// TKThread+Scheduling: a thread's quality of service and NSThread priority, applied to its OS
// scheduling through SchedulingClass. Thread-safe: every field lives in `attributes` and is read
// and written under its lock; the OS calls for an executing thread are made under that lock too,
// so the thread cannot exit (and its id be reused) meanwhile.
//
// What reads back: `qualityOfService` reads what was set; `threadPriority` reads the priority in
// force — the one set if the OS honoured it, otherwise what the OS kept (raising priority without
// CAP_SYS_NICE or RLIMIT_NICE headroom is refused), and after a QoS change the priority that
// class stands for (SchedulingClass.priority).

extension TKThread {
    /// The thread's quality of service, applied to its OS scheduling (see `SchedulingClass`).
    /// Reads back what was set; raising it may be refused by the OS without error (then
    /// `threadPriority` tells what is in force).
    public var qualityOfService: TKQualityOfService {
        get { attributes.current.qualityOfService }
        set {
            attributes.withLock { a in
                a.qualityOfService = newValue
                a.scheduling = SchedulingClass(newValue)
                a.threadPriority = a.scheduling.priority
                if a.lifecycle == .executing { applySchedulingLocked(&a) }
            }
        }
    }

    /// NSThread's priority, 0.0 ... 1.0 (default 0.5), applied as a nice value (see
    /// `SchedulingClass`). Reads back the priority really in force: what was set when the OS
    /// honoured it, else what it kept. Setting it cannot say whether the OS honoured it: use
    /// `setThreadPriority(_:)`, which does.
    public var threadPriority: Double {
        get { attributes.current.threadPriority }
        set { setThreadPriority(newValue) }
    }

    /// Sets the thread's priority (0.0 ... 1.0; outside values are clamped, NaN counts as 0.5)
    /// and says whether the OS honoured it, as Apple's `setThreadPriority:` does: false when the
    /// OS refused (raising priority without privilege), and `threadPriority` then reads the
    /// priority still in force. For a thread not yet started it is recorded and applied at
    /// `start()` (true; a refusal then shows in `threadPriority`); for a finished thread, false.
    @discardableResult
    public func setThreadPriority(_ priority: Double) -> Bool {
        attributes.withLock { a in
            guard a.lifecycle != .finished else { return false }
            a.scheduling = SchedulingClass(priority: priority)
            a.threadPriority = SchedulingClass.clamped(priority)
            guard a.lifecycle == .executing else { return true }
            return applySchedulingLocked(&a)
        }
    }

    /// `setThreadPriority(_:)` for the calling thread (Apple's class method).
    @discardableResult
    public static func setThreadPriority(_ priority: Double) -> Bool {
        current.setThreadPriority(priority)
    }

    /// Applies `a.scheduling` to the executing thread `a.tid`. When the OS refuses, records what
    /// is in force instead and returns false. Attributes lock held.
    @discardableResult
    func applySchedulingLocked(_ a: inout Attributes) -> Bool {
        attributes.assertHeld("TKThread.attributes")
        if a.scheduling.apply(to: a.tid) { return true }
        guard let inForce = SchedulingClass.inForce(of: a.tid) else { return false }
        a.scheduling = inForce
        a.threadPriority = inForce.priority
        return false
    }
}
