// SchedulingClass: how ThreadKit turns a quality of service or an NSThread-style priority into
// real Linux scheduling. Stateless; `apply` may be called from any thread for any live thread id.
//
// The mapping (nice runs from -20, most favoured, to 19):
//
// | TKQualityOfService | policy      | nice |
// |--------------------|-------------|------|
// | userInteractive    | SCHED_OTHER |  -10 |
// | userInitiated      | SCHED_OTHER |   -5 |
// | default            | SCHED_OTHER |    0 |
// | unspecified        | SCHED_OTHER |    0 |   (no QoS: an unspecified pthread's scheduling)
// | utility            | SCHED_OTHER |    5 |
// | background         | SCHED_BATCH |   10 |
//
// `threadPriority` p in 0.0...1.0 (NSThread's scale, default 0.5) maps linearly to nice
// round((0.5 - p) * 20) under SCHED_OTHER: 1.0 → -10, 0.5 → 0, 0.0 → 10. Values outside the
// range are clamped (NaN counts as 0.5). Whichever of the two was set last decides.
//
// Back from nice to a priority: p = 0.5 - nice / 20, clamped (so nice 10, background's, reads 0.0).
//
// Lowering priority always works. Raising it (a negative nice, or leaving SCHED_BATCH) needs
// CAP_SYS_NICE or RLIMIT_NICE headroom; without them the OS refuses and the thread keeps its
// previous scheduling: `apply` says so (false), and `inForce(of:)` reads what the thread has.
import CThreadKit
import Glibc

struct SchedulingClass: Equatable {
    let policy: Int32
    let nice: Int32

    init(policy: Int32, nice: Int32) {
        self.policy = policy
        self.nice = nice
    }

    init(_ qos: TKQualityOfService) {
        switch qos {
        case .userInteractive: self.init(policy: SCHED_OTHER, nice: -10)
        case .userInitiated: self.init(policy: SCHED_OTHER, nice: -5)
        case .default, .unspecified: self.init(policy: SCHED_OTHER, nice: 0)
        case .utility: self.init(policy: SCHED_OTHER, nice: 5)
        case .background: self.init(policy: TK_SCHED_BATCH, nice: 10)
        }
    }

    init(priority: Double) {
        self.init(policy: SCHED_OTHER, nice: Int32(((0.5 - SchedulingClass.clamped(priority)) * 20).rounded()))
    }

    /// A priority brought into 0.0 ... 1.0 (NaN: 0.5).
    static func clamped(_ priority: Double) -> Double {
        priority.isNaN ? 0.5 : min(max(priority, 0), 1)
    }

    /// The NSThread priority this class stands for: 0.5 - nice / 20, clamped.
    var priority: Double { SchedulingClass.clamped(0.5 - Double(nice) / 20) }

    /// Applies this class to kernel thread `tid`. False when the OS refused part of it (EPERM or
    /// EACCES: raising priority without privilege) or the thread has exited (ESRCH).
    @discardableResult
    func apply(to tid: UInt32) -> Bool {
        var param = sched_param(sched_priority: 0)
        let policySet = sched_setscheduler(pid_t(tid), policy, &param) == 0
        let niceSet = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid), nice) == 0
        return policySet && niceSet
    }

    /// The policy and nice value kernel thread `tid` has now; nil if it cannot be read (exited).
    static func inForce(of tid: UInt32) -> SchedulingClass? {
        let policy = sched_getscheduler(pid_t(tid))
        guard policy >= 0 else { return nil }
        errno = 0 // getpriority may return -1 as a value
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid))
        guard errno == 0 else { return nil }
        return SchedulingClass(policy: policy & ~0x4000_0000, nice: nice) // without SCHED_RESET_ON_FORK
    }
}
