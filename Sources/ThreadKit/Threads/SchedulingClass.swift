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
// | utility            | SCHED_OTHER |    5 |
// | background         | SCHED_BATCH |   10 |
//
// `threadPriority` p in 0.0...1.0 (NSThread's scale, default 0.5) maps linearly to nice
// round((0.5 - p) * 20) under SCHED_OTHER: 1.0 → -10, 0.5 → 0, 0.0 → 10. Values outside the
// range are clamped (NaN counts as 0.5). Whichever of the two was set last decides.
//
// Lowering priority always works. Raising it (a negative nice, or leaving SCHED_BATCH) needs
// CAP_SYS_NICE or RLIMIT_NICE headroom; without them the OS refuses and the thread keeps its
// previous scheduling, as SPEC §1 allows ("raising may be refused by the OS without error").
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
        case .default: self.init(policy: SCHED_OTHER, nice: 0)
        case .utility: self.init(policy: SCHED_OTHER, nice: 5)
        case .background: self.init(policy: TK_SCHED_BATCH, nice: 10)
        }
    }

    init(priority: Double) {
        let p = priority.isNaN ? 0.5 : min(max(priority, 0), 1)
        self.init(policy: SCHED_OTHER, nice: Int32(((0.5 - p) * 20).rounded()))
    }

    /// Applies this class to kernel thread `tid`. Refusals (EPERM/EACCES) are expected when raising
    /// priority without privilege and are ignored; a thread that has exited (ESRCH) is ignored too.
    func apply(to tid: UInt32) {
        var param = sched_param(sched_priority: 0)
        _ = sched_setscheduler(pid_t(tid), policy, &param)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid), nice)
    }
}
