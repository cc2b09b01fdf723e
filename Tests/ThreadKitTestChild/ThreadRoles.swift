// ThreadRoles: child processes for the TKThread behaviours that only a whole process shows:
// exit-time joining of joinable threads, the once-per-process multithreading notification (and
// performInBackground as the first thread), the default uncaught-error report, detaching after
// start, a joinable thread's value handed to nobody, priorities refused to an unprivileged process, and a thread whose stack the OS cannot map (under a lowered RLIMIT_AS).
// joinable-save, which the tour also runs, is in Sources/ChildProcessRoles (SharedChildRoles).
import ChildProcessRoles
import Glibc
import ThreadKit

enum ThreadRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "detached-blocked", usage: "(main returns while a detached thread blocks forever)") { _ in
            TKThread.detachNewThread { TKThread.sleep(for: .seconds(3600)) }
            return 0
        },
        ChildRole(name: "multithreaded", usage: "(prints when willBecomeMultiThreaded is posted, relative to thread starts)") { _ in
            let log = SharedBox<[String]>([]) // guarded by lock
            let lock = TKLock()
            TKNotificationCenter.default.addObserver(forName: TKThread.willBecomeMultiThreadedNotification, object: nil) { _ in
                lock.withLock { log.value.append("notification multithreaded=\(TKThread.isMultiThreaded())") }
            }
            lock.withLock { log.value.append("before multithreaded=\(TKThread.isMultiThreaded())") }
            let threads = (1...3).map { n in TKThread { lock.withLock { log.value.append("thread \(n) runs") } } }
            for t in threads { t.start() }
            for t in threads { t.join() }
            lock.withLock { log.value.append("after multithreaded=\(TKThread.isMultiThreaded())") }
            for line in log.value { Console.out(line) }
            return 0
        },
        ChildRole(
            name: "perform-in-background",
            usage: "(performInBackground as the process's first thread; prints isMultiThreaded before and after)"
        ) { _ in
            let mainThread = pthread_self()
            let ran = TKCondition()
            let seen = SharedBox<String?>(nil) // guarded by ran
            Console.out("before multithreaded=\(TKThread.isMultiThreaded())")
            let thread = TKThread.performInBackground {
                let line = "background onMainPthread=\(pthread_equal(pthread_self(), mainThread) != 0) name=\(TKThread.current.name ?? "-")"
                ran.withLock {
                    seen.value = line
                    ran.signal()
                }
            }
            let line = ran.withLock { () -> String in
                while seen.value == nil { ran.wait() }
                return seen.value!
            }
            Console.out(line)
            Console.out("detached=\(thread.isDetached)")
            Console.out("after multithreaded=\(TKThread.isMultiThreaded())")
            return 0
        },
        ChildRole(name: "uncaught-default", usage: "(a throwing thread's error goes to the default handler)") { _ in
            struct DiskFull: Error {}
            let io = TKThread(name: "io", throwing: { throw DiskFull() })
            io.start()
            io.join()
            Console.out("process still running after the error")
            return 0
        },
        ChildRole(name: "thread-detach-after-start", usage: "(a joinable thread blocking forever is detached after start; main returns)") {
            _ in
            let blocked = TKThread(name: "blocked") { TKThread.sleep(for: .seconds(3600)) }
            blocked.isDetached = false
            blocked.start()
            blocked.isDetached = true // pthread_detach: exit no longer waits for it
            Console.out("detached=\(blocked.isDetached)")
            return 0
        },
        ChildRole(name: "thread-priority-unprivileged", usage: "(drops privilege, then raises and lowers a thread's priority)") { _ in
            // Without CAP_SYS_NICE (leave root) and without RLIMIT_NICE headroom, raising is refused.
            if geteuid() == 0 && setuid(65534) != 0 {
                Console.err("setuid failed")
                return 3
            }
            var none = rlimit(rlim_cur: 0, rlim_max: 0)
            _ = setrlimit(__rlimit_resource_t(__RLIMIT_NICE.rawValue), &none)
            let lines = SharedBox<[String]>([]) // written by the thread, read after join
            let thread = TKThread(name: "prio") {
                func line(_ what: String, _ ok: Bool) {
                    let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
                    lines.value.append("\(what) ok=\(ok) priority=\(TKThread.current.threadPriority) nice=\(nice)")
                }
                line("raise-to-1.0", TKThread.setThreadPriority(1.0))
                line("lower-to-0.25", TKThread.current.setThreadPriority(0.25))
                line("raise-to-0.5", TKThread.setThreadPriority(0.5))
                TKThread.current.qualityOfService = .userInteractive
                line("qos-userInteractive", true)
            }
            thread.start()
            thread.join()
            for l in lines.value { Console.out(l) }
            return 0
        },
        ChildRole(
            name: "thread-stack-unmappable",
            usage: "(address space capped 1 GiB above what is mapped; a thread asking for a "
                + "64 TiB stack: print what start() reported, one `key value` per line)"
        ) { _ in
            // Whether a 64 TiB mapping fits depends on the machine (47- or 56-bit user address
            // space) and on overcommit; under an RLIMIT_AS just above what the process maps now it
            // fits nowhere. Checked first with a plain mmap of the same size (the premise).
            guard let mapped = virtualSizeBytes() else {
                Console.err("cannot read VmSize")
                return 3
            }
            var limit = rlimit()
            _ = getrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit)
            limit.rlim_cur = min(rlim_t(mapped + (1 << 30)), limit.rlim_max)
            guard setrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit) == 0 else {
                Console.err("setrlimit failed")
                return 3
            }
            let stack = 1 << 46
            let probe = mmap(nil, stack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
            let premise = probe == UnsafeMutableRawPointer(bitPattern: -1)
            if !premise { _ = munmap(probe, stack) }
            Console.out("premise-mmap-refused \(premise)")
            let reported = SharedBox<(TKThread, any Error)?>(nil) // set by start() on this thread
            TKThread.uncaughtErrorHandler = { thread, error in reported.value = (thread, error) }
            let ran = SharedBox(false) // read after the thread is known to have ended
            let huge = TKThread(name: "huge") { ran.value = true }
            do { try huge.setStackSize(stack) } catch {
                Console.out("setStackSize-threw \(error)")
                return 1
            }
            huge.start()
            let error = reported.value?.1 as? TKError
            Console.out("reported-for-this-thread \(reported.value?.0 === huge)")
            Console.out("code \(error.map { "\($0.code)" } ?? "none")")
            Console.out("errno \(error?.errno.map(String.init) ?? "none")")
            Console.out("message \(error?.message ?? "none")")
            Console.out("finished \(huge.isFinished)")
            Console.out("joined-at-once \(huge.join(until: .now))")
            Console.out("ran \(ran.value)")
            return 0
        },
    ]

    /// The process's virtual size (VmSize of /proc/self/status) in bytes.
    static func virtualSizeBytes() -> Int? {
        guard let file = fopen("/proc/self/status", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard text.hasPrefix("VmSize:") else { continue }
            return text.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
        }
        return nil
    }
}
