import CThreadKit
// DispatchPoolRoles: child processes for the dispatch pool (issue 12), which need a pool that has
// not started yet. Width: the pool sizes itself from the CPUs the process may use, so the role
// restricts its own affinity mask before the pool starts and prints the global queue's
// description (which states the width); TK_CPU_BUDGET, which would override the mask, is removed
// from its environment first, so the role answers the same under a test run that sets it; exit
// status 0, 3 if the mask could not be set. Normal
// from background: the first normal worker is asked for by a background worker, and the role
// prints the scheduling policy and nice value the default-QoS item ran with (run as nobody when
// started as root); exit status 0, 3 if root could not drop its privileges. Submission order: a
// pool of width 1 (TK_CPU_BUDGET=1, set before the pool starts) runs one job that submits N items
// to the global queue, then prints how far their start order is from the submission order.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum DispatchPoolRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "dispatch-pool-submission-order",
            usage: "N (width 1: one job submits N items; print the inversions of their start order)"
        ) { arguments in
            setenv("TK_CPU_BUDGET", "1", 1) // before the pool reads it
            let n = max(1, Int(arguments.first ?? "200000") ?? 200_000)
            // Start positions, written once each by the item (index k of the start sequence).
            let order = UnsafeMutablePointer<Int32>.allocate(capacity: n)
            let started = Atomic<Int>(0)
            let finished = Atomic<Int>(0)
            let done = TKDispatchSemaphore(value: 0)
            nonisolated(unsafe) let slots = order
            TKDispatchQueue.global().async {
                for i in 0..<n {
                    TKDispatchQueue.global().async {
                        slots[started.wrappingAdd(1, ordering: .relaxed).oldValue] = Int32(i)
                        if finished.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == n { done.signal() }
                    }
                }
            }
            guard done.wait(until: .now + .seconds(60)) == .success else {
                print("unfinished")
                return 1
            }
            // Inversions: pairs started in the other order than submitted (a Fenwick tree over
            // the indices, walking the start sequence from its end).
            var tree = [Int](repeating: 0, count: n + 1)
            var inversions = 0
            for k in stride(from: n - 1, through: 0, by: -1) {
                var i = Int(order[k])
                while i > 0 {
                    inversions += tree[i]
                    i -= i & -i
                }
                i = Int(order[k]) + 1
                while i <= n {
                    tree[i] += 1
                    i += i & -i
                }
            }
            print("items \(n) inversions \(inversions)")
            return 0
        },
        ChildRole(
            name: "dispatch-pool-width-affinity",
            usage: "N (restrict this process to its first N allowed CPUs, then print the global queue)"
        ) { arguments in
            unsetenv("TK_CPU_BUDGET") // before the pool reads it: the mask alone decides here
            let kept = tk_affinity_keep_first(Int32(max(1, Int(arguments.first ?? "1") ?? 1)))
            guard kept > 0 else { return 3 }
            print("kept \(kept)")
            print(TKDispatchQueue.global().debugDescription)
            return 0
        },
        ChildRole(
            name: "dispatch-pool-normal-from-background",
            usage: "(a background item submits a default-QoS item to a pool with no normal worker yet; print its policy and nice)"
        ) { _ in
            // Unprivileged, as most programs run: as root (CI) a thread may raise its own priority
            // back, which hides the inheritance. Dropped before the pool starts.
            if getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0) { return 3 }
            let done = TKDispatchSemaphore(value: 0)
            final class Seen: @unchecked Sendable {
                var policy: Int32 = -1
                var nice: Int32 = 99
            }
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
        ChildRole(
            name: "dispatch-pool-blocked-crowd",
            usage: "N HOLD_MS [PIDS_CGROUP_DIR] (N global-queue items block in read(2) for HOLD_MS: print the peak "
                + "thread count, the CPU time the hold cost and whether a process can still be spawned, then "
                + "release them and wait for all; with a cgroup directory, join it first)"
        ) { arguments in
            let n = max(1, Int(arguments.first ?? "2000") ?? 2_000)
            let hold = max(1, Int(arguments.dropFirst().first ?? "1000") ?? 1_000)
            if arguments.count > 2 {
                let procs = arguments[2] + "/cgroup.procs"
                let fd = open(procs, O_WRONLY)
                let pid = "\(getpid())"
                guard fd >= 0, write(fd, pid, pid.utf8.count) == pid.utf8.count else {
                    Console.err("cannot join \(procs): errno \(errno)")
                    return 3
                }
                close(fd)
            }
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { return 3 }
            let (readEnd, writeEnd) = (fds[0], fds[1])
            let done = Atomic<Int>(0)
            let finished = TKDispatchSemaphore(value: 0)
            for _ in 0..<n {
                TKDispatchQueue.global().async {
                    var byte: UInt8 = 0
                    _ = read(readEnd, &byte, 1)
                    if done.wrappingAdd(1, ordering: .relaxed).newValue == n { finished.signal() }
                }
            }
            func threads() -> Int {
                let fd = open("/proc/self/status", O_RDONLY)
                guard fd >= 0 else { return 0 }
                defer { close(fd) }
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = read(fd, &buffer, buffer.count)
                let status = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self)
                let line = status.split(separator: "\n").first { $0.hasPrefix("Threads:") } ?? ""
                return Int(line.dropFirst("Threads:".count).filter { $0.isNumber }) ?? 0
            }
            func cpu() -> Int {
                var usage = rusage()
                getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
                return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000
                    + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000
            }
            let cpuBefore = cpu()
            var peak = 0
            let end = ContinuousClock.now + .milliseconds(hold)
            while ContinuousClock.now < end {
                peak = max(peak, threads())
                usleep(10_000)
            }
            let cpuHold = cpu() - cpuBefore
            var child: pid_t = 0
            let spawned = posix_spawn(&child, "/bin/true", nil, nil, [strdup("true"), nil], environ)
            var status: Int32 = 0
            if spawned == 0 { waitpid(child, &status, 0) }
            Console.out("peak-threads \(peak)")
            Console.out("hold-cpu-ms \(cpuHold)")
            Console.out("spawn \(spawned == 0 ? "ok" : "failed errno \(spawned)")")
            let bytes = [UInt8](repeating: 1, count: n)
            var written = 0
            while written < n {
                let w = bytes.withUnsafeBytes { write(writeEnd, $0.baseAddress! + written, n - written) }
                if w <= 0 { break }
                written += w
            }
            let all = finished.wait(until: .now + .seconds(120)) == .success
            Console.out("finished \(done.load(ordering: .relaxed)) of \(n)")
            return all ? 0 : 1
        },
    ]
}
