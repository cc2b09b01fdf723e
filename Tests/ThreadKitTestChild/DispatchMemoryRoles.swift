// DispatchMemoryRoles: a burst's memory comes back (issue 49, finding 5). `dispatch-burst-memory
// MODE N BOUND_MIB DEADLINE_S` starts a pool of width 1 (TK_CPU_BUDGET=1) and its worker, notes
// its resident set (VmRSS in /proc/self/status, the kernel's count, not ThreadKit's), pushes N
// empty blocks through the global queue while its one worker spins in a job (MODE `global`: one
// producer; every block waits in the pool's rings; waited for with a group) or into a suspended
// serial queue that is then resumed and drained (MODE `serial`), and then, every 50 ms, calls
// malloc_trim(0) and reads VmRSS again until it is back within BOUND_MIB of where it started or
// DEADLINE_S seconds have passed. Prints `baseline KIB peak KIB after KIB seconds S` (peak is
// VmHWM); exit status 0 when it came back within the bound, 1 when not, 2 on bad arguments, 3
// when VmRSS cannot be read.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum DispatchMemoryRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "dispatch-burst-memory",
            usage: "global|serial N BOUND_MIB DEADLINE_S (N empty blocks in a burst; exit 0 once VmRSS is back within the bound)"
        ) { arguments in
            guard arguments.count == 4, ["global", "serial"].contains(arguments[0]), let n = Int(arguments[1]),
                let bound = Int(arguments[2]), let deadline = Int(arguments[3])
            else { return 2 }
            // A pool of width 1 (set before it starts), whose one worker the global burst finds
            // busy: every block waits in the pool's rings, however the threads are scheduled.
            setenv("TK_CPU_BUDGET", "1", 1)
            // Start the pool's workers (and the stage's shards and rings) before the baseline.
            TKDispatchQueue.concurrentPerform(iterations: 64) { _ in }
            let warm = TKDispatchGroup()
            for _ in 0..<1_000 { TKDispatchQueue.global().async(group: warm) {} }
            warm.wait()
            trim()
            let baseline = status("VmRSS")
            guard baseline > 0 else { return 3 }
            // The serial queue lives until the end: its rings are what is measured.
            let serial = TKDispatchQueue(label: "tk.test.burst")
            defer { withExtendedLifetime(serial) {} }
            if arguments[0] == "global" {
                let group = TKDispatchGroup()
                let queue = TKDispatchQueue.global()
                let busy = Atomic<Int>(0) // 1: the worker spins; 2: released
                queue.async {
                    busy.store(1, ordering: .releasing)
                    while busy.load(ordering: .acquiring) != 2 { sched_yield() }
                }
                while busy.load(ordering: .acquiring) != 1 { sched_yield() }
                for _ in 0..<n { queue.async(group: group) {} }
                busy.store(2, ordering: .releasing)
                group.wait()
            } else {
                serial.suspend()
                for _ in 0..<n { serial.async {} }
                serial.resume()
                serial.sync {} // every earlier block has run
            }
            let start = ContinuousClock.now
            let end = start + .seconds(deadline)
            var after = Int.max
            while true {
                trim()
                after = status("VmRSS")
                if after - baseline <= bound * 1_024 || ContinuousClock.now >= end { break }
                TKThread.sleep(for: .milliseconds(50))
            }
            let waited = (ContinuousClock.now - start).components
            let seconds = Double(waited.seconds) + Double(waited.attoseconds / 10_000_000_000_000_000) / 100
            print("baseline \(baseline) peak \(status("VmHWM")) after \(after) seconds \(seconds)")
            return after - baseline <= bound * 1_024 ? 0 : 1
        }
    ]

    /// glibc's malloc_trim(0): every arena's free pages back to the kernel (looked up by name:
    /// Glibc's module does not import <malloc.h>).
    private static func trim() {
        typealias MallocTrim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(nil, "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
    }

    /// A `kB` field of /proc/self/status, in KiB (-1 if missing).
    private static func status(_ field: String) -> Int {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return -1 }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8_192)
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return -1 }
        let text = String(decoding: bytes[0..<n], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.dropFirst(field.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? -1
        }
        return -1
    }
}
