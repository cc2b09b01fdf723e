// TraceRoles: `threadkit child trace-from-launch FILE.json` — what a process started with
// TK_DIAGNOSTICS=trace records without calling TKTrace.start (docs/DiagnosticsTrace.md §1).
// Prints "recording: true|false" first, then, after five dispatch items on "launch.q" and a
// TKThread "launch-thread", writes the Chrome JSON to FILE.json and prints "events N".
// Exit 0, or 1 when the file cannot be written.
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
    ]
}
