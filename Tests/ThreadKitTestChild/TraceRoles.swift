// TraceRoles: child processes for the trace recorder (docs/DiagnosticsTrace.md).
//
// `ThreadKitTestChild trace-from-launch FILE.json` — what a process started with
// TK_DIAGNOSTICS=trace records without calling TKTrace.start (§1). Prints "recording: true|false"
// first, then, after five dispatch items on "launch.q" and a TKThread "launch-thread", writes the
// Chrome JSON to FILE.json and prints "events N". Exit 0, or 1 when the file cannot be written.
//
// `ThreadKitTestChild trace-export-bounded export|control FILE.json THREADS EVENTS CAPACITY TOTAL` —
// an export's memory (§3): TKTrace.start(capacity: CAPACITY, totalCapacity: TOTAL); THREADS
// TKThreads, all alive at once, each marks EVENTS events ("t<i>"), the last one "last <i>"; then
// it prints "rss-before KB" (getrusage's peak), exports to FILE.json (mode export; nothing in mode
// control), prints "rss-after KB". Exit 0, or 1 when the export fails or the threads do not all
// record within 60 s.
import ChildProcessRoles
import Glibc
import ThreadKit

enum TraceRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "trace-from-launch", usage: "FILE.json") { arguments in
            Console.out("recording: \(TKTrace.isRecording)")
            let queue = TKDispatchQueue(label: "launch.q")
            let group = TKDispatchGroup()
            for _ in 0..<5 { queue.async(group: group) {} }
            group.wait()
            let thread = TKThread(name: "launch-thread") {}
            thread.isDetached = false
            thread.start()
            thread.join()
            TKTrace.stop()
            do {
                try TKTrace.writeChromeJSON(to: arguments.first ?? "/dev/null")
            } catch {
                Console.err("\(error)")
                return 1
            }
            Console.out("events \(TKTrace.events.count)")
            return 0
        },
        ChildRole(name: "trace-export-bounded", usage: "export|control FILE.json THREADS EVENTS CAPACITY TOTAL") { arguments in
            guard arguments.count == 6, let threads = Int(arguments[2]), let events = Int(arguments[3]),
                let capacity = Int(arguments[4]), let total = Int(arguments[5]), threads > 0, events > 0
            else { return 2 }
            TKTrace.start(capacity: capacity, totalCapacity: total)
            let recorded = TKDispatchSemaphore(value: 0)
            let release = TKDispatchSemaphore(value: 0)
            var started: [TKThread] = []
            for index in 0..<threads {
                let thread = TKThread(name: "exporter-\(index)") {
                    for _ in 1..<events { TKTrace.mark("t\(index)") }
                    TKTrace.mark("last \(index)")
                    _ = recorded.signal()
                    release.wait() // alive until every thread has recorded: no ring is recycled
                }
                thread.isDetached = false
                try? thread.setStackSize(128 * 1024)
                thread.start()
                started.append(thread)
            }
            let deadline = ContinuousClock.now + .seconds(60)
            for _ in 0..<threads where recorded.wait(until: deadline) != .success {
                Console.err("the threads did not all record within 60 s")
                return 1
            }
            for _ in 0..<threads { _ = release.signal() }
            for thread in started { thread.join() }
            TKTrace.stop()
            Console.out("rss-before \(peakResidentKilobytes())")
            if arguments[0] == "export" {
                do {
                    try TKTrace.writeChromeJSON(to: arguments[1])
                } catch {
                    Console.err("\(error)")
                    return 1
                }
            }
            Console.out("rss-after \(peakResidentKilobytes())")
            return 0
        },
    ]

    /// The process's peak resident set size so far, in KiB (getrusage's ru_maxrss on Linux).
    static func peakResidentKilobytes() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss
    }
}
