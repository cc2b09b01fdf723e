// WorkerPriority: the OS priority of a normal-tier worker follows the QoS of the job it runs
// (docs/DispatchPool.md, "QoS: order, aging, OS priority"), using SchedulingClass's nice values
// (userInteractive -10, userInitiated -5, default 0, utility 5), but only where the process may
// raise a priority again (CAP_SYS_NICE, or an RLIMIT_NICE that allows nice -10): a worker lowered
// for a utility job must be able to come back up for the next interactive one. Elsewhere normal
// workers stay at the class they were started with. Stateless; any thread.
import Glibc

enum WorkerPriority {
    /// The QoS of each run-queue level (RunQueues numbering).
    static let qosOfLevel: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]

    /// Whether priorities may be raised: decided once, from the capability set and RLIMIT_NICE,
    /// without changing anything.
    static let canRaise: Bool = {
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(13 /* RLIMIT_NICE */), &limit) == 0, limit.rlim_cur >= 30 { return true }
        guard let status = SystemCall.readSmallFile("/proc/self/status", limit: 8192),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
            let hex = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).last,
            let bits = UInt64(hex, radix: 16)
        else { return false }
        return bits & (1 << 23) != 0 // CAP_SYS_NICE
    }()

    /// Gives the calling worker thread (`tid`) the nice value of `level`'s QoS.
    static func apply(level: Int, to tid: UInt32) {
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid), SchedulingClass(qosOfLevel[level]).nice)
    }
}
