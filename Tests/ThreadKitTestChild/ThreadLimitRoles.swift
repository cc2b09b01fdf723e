// ThreadLimitRoles: a process that may create no thread at all (issue 15, item 6). Root ignores
// RLIMIT_NPROC (CAP_SYS_RESOURCE/CAP_SYS_ADMIN), and this machine's pids cgroup is not writable, so
// the role drops to user nobody (65534) first: with the soft RLIMIT_NPROC at 0, every clone(2) of
// that user fails with EAGAIN, whatever other processes nobody runs elsewhere; raising the soft
// limit back up to the hard limit makes threads available again.
import ChildProcessRoles
import Glibc
import ThreadKit

enum ThreadLimitRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "thread-limit",
            usage: "(no thread can start: start throws, the pool and the manager report once; "
                + "after the limit is lifted the queued work and timer run with no further submission)"
        ) { _ in
            var initial = rlimit()
            _ = getrlimit(__rlimit_resource_t(__RLIMIT_NPROC.rawValue), &initial)
            if geteuid() == 0 && !DistributedLockUserRoles.becomeNobody() {
                Console.err("cannot become nobody")
                return 3
            }
            func limitThreads(_ soft: rlim_t) {
                var limit = rlimit(rlim_cur: min(soft, initial.rlim_max), rlim_max: initial.rlim_max)
                if setrlimit(__rlimit_resource_t(__RLIMIT_NPROC.rawValue), &limit) != 0 {
                    Console.err("setrlimit failed")
                    exit(3)
                }
            }
            limitThreads(0)
            // 1. A thread start fails with a TKError naming errno; start() reports it.
            do {
                try TKThread {}.startOrThrow()
                Console.out("a thread started under the limit")
                return 3
            } catch let error as TKError {
                Console.out("startOrThrow: \(error.code) errno=\(error.errno ?? 0) \(error.message)")
            } catch { return 3 }
            let reported = TKThread {}
            reported.start()
            Console.out("start() finished=\(reported.isFinished)")
            // 2. Work for the pool and the manager while no thread can start.
            let ran = TKDispatchSemaphore(value: 0)
            let fired = TKDispatchSemaphore(value: 0)
            for _ in 0..<3 { TKDispatchQueue.global().async { ran.signal() } }
            TKDispatchQueue.global(qos: .background).async { ran.signal() }
            TKDispatchQueue.global().asyncAfter(deadline: .now + .milliseconds(5)) { fired.signal() }
            // Waits that time out while the limit holds (each also retries, and fails again).
            let early = ran.wait(until: .now + .milliseconds(50))
            Console.out("before the limit is lifted: ran=\(early == .success)")
            // 3. Lift the limit and submit nothing more: the waits below retry the starts.
            limitThreads(initial.rlim_max)
            var count = 0
            for _ in 0..<4 where ran.wait(until: .now + .seconds(30)) == .success { count += 1 }
            let timer = fired.wait(until: .now + .seconds(30)) == .success
            Console.out("after the limit is lifted: ran \(count) of 4, timer fired=\(timer)")
            return count == 4 && timer ? 0 : 1
        }
    ]
}
