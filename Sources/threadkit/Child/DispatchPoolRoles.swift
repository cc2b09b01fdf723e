// DispatchPoolRoles: child processes for the dispatch pool (issue 12), which need a pool that has
// not started yet. Width: the pool sizes itself from the CPUs the process may use, so the role
// restricts its own affinity mask before the pool starts and prints the global queue's
// description (which states the width); TK_CPU_BUDGET, which would override the mask, is removed
// from its environment first, so the role answers the same under a test run that sets it; exit
// status 0, 3 if the mask could not be set. Normal
// from background: the first normal worker is asked for by a background worker, and the role
// prints the scheduling policy and nice value the default-QoS item ran with (run as nobody when
// started as root); exit status 0, 3 if root could not drop its privileges.
import CThreadKit
import Glibc
import ThreadKit

enum DispatchPoolRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-pool-width-affinity",
                  usage: "N (restrict this process to its first N allowed CPUs, then print the global queue)") { arguments in
            unsetenv("TK_CPU_BUDGET")   // before the pool reads it: the mask alone decides here
            let kept = tk_affinity_keep_first(Int32(max(1, Int(arguments.first ?? "1") ?? 1)))
            guard kept > 0 else { return 3 }
            print("kept \(kept)")
            print(TKDispatchQueue.global().debugDescription)
            return 0
        },
        ChildRole(name: "dispatch-pool-normal-from-background",
                  usage: "(a background item submits a default-QoS item to a pool with no normal worker yet; print its policy and nice)") { _ in
            // Unprivileged, as most programs run: as root (CI) a thread may raise its own priority
            // back, which hides the inheritance. Dropped before the pool starts.
            if getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0) { return 3 }
            let done = TKDispatchSemaphore(value: 0)
            final class Seen: @unchecked Sendable { var policy: Int32 = -1; var nice: Int32 = 99 }
            let seen = Seen()
            TKDispatchQueue.global(qos: .background).async {
                TKDispatchQueue.global().async {
                    seen.policy = sched_getscheduler(0)
                    errno = 0
                    seen.nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
                    done.signal()
                }
            }
            guard done.wait(until: .now + .seconds(30)) == .success else { return 2 }
            print("main nice \(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0))")
            print("default item policy \(seen.policy) nice \(seen.nice)")
            return 0
        },
    ]
}
