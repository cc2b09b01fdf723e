// DispatchPoolRoles: child processes for the dispatch pool's width (issue 12): the pool sizes
// itself from the CPUs the process may use, so the role restricts its own affinity mask before the
// pool starts and prints the global queue's description (which states the width). Exit status 0;
// 3 if the mask could not be set.
import CThreadKit
import ThreadKit

enum DispatchPoolRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-pool-width-affinity",
                  usage: "N (restrict this process to its first N allowed CPUs, then print the global queue)") { arguments in
            let kept = tk_affinity_keep_first(Int32(max(1, Int(arguments.first ?? "1") ?? 1)))
            guard kept > 0 else { return 3 }
            print("kept \(kept)")
            print(TKDispatchQueue.global().debugDescription)
            return 0
        },
    ]
}
