// FlightRoles: child processes for the flight recorder (docs/DiagnosticsTrace.md §8).
//
// `ThreadKitTestChild flight-hang` — started with TK_DIAGNOSTICS=flight:5s,hangs:200ms and
// TK_FLIGHT_DIR set. Marks "old-mark" and runs an item on "flight.old", then lets those events
// age past the window (it sleeps until the window plus 1 s has passed since); then a task on the
// serial queue "flight.tasks" (priority high, two jobs around an `await` on a TKThread's end), the
// marks "recent-mark" and "just-before-hang", and an item on "flight.hang" that does not return
// until the dump the watchdog's hang report triggers is complete in TK_FLIGHT_DIR (its .html file
// ends with </html>; 60 s at most). Prints "dumped JSON HTML". Exit 0; 1 when not recording or no
// dump appears within 60 s.
//
// `ThreadKitTestChild flight-memory-bound DIR WAVES` — TKTrace.startFlightRecorder(window: 200 ms,
// capacity: 1024, totalCapacity: 8192); WAVES waves of 8 TKThreads, each marking 20,000 events
// ("wave <w>"); after the first wave it waits until 300 ms have passed (its events are then older
// than the window). After each wave prints "memory W BYTES" (TKTrace.recorderMemory) and at the
// end "rss-growth KB" (peak RSS after the waves minus before), then dumps into DIR and prints
// "dumped JSON HTML". Exit 0, or 1 when the dump fails.
//
// `ThreadKitTestChild flight-misuse` — started with TK_DIAGNOSTICS=flight:5s and TK_FLIGHT_DIR set.
// Marks "before-misuse", then sets TKDiagnostics.hangThreshold to zero: a misuse, which writes the
// flight dump before it stops the process (a signal, "ThreadKit misuse:" on stderr).
import ChildProcessRoles
import Glibc
import ThreadKit

enum FlightRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "flight-hang", usage: "") { _ in
            guard TKTrace.isFlightRecording else {
                Console.err("the flight recorder is not on (TK_DIAGNOSTICS=flight:5s expected)")
                return 1
            }
            guard let directory = getenv("TK_FLIGHT_DIR").map({ String(cString: $0) }) else { return 1 }
            let group = TKDispatchGroup()
            TKTrace.mark("old-mark")
            TKDispatchQueue(label: "flight.old").async(group: group) { TKTrace.mark("old-item-mark") }
            group.wait()
            // Age those events past the window: what the dump must leave out.
            TKThread.sleep(until: .now + TKTrace.flightWindow + .seconds(1))

            // A task with two jobs on a serial queue, resumed from a ThreadKit continuation.
            let tasks = TKDispatchQueue(label: "flight.tasks")
            let helper = TKThread(name: "flight-helper") { TKThread.sleep(for: .milliseconds(20)) }
            helper.isDetached = false
            let taskDone = TKDispatchSemaphore(value: 0)
            helper.start()
            Task(executorPreference: tasks, priority: .high) {
                TKTrace.mark("task-first-job")
                try? await helper.finished()
                TKTrace.mark("task-second-job")
                taskDone.signal()
            }
            taskDone.wait()
            helper.join()
            TKTrace.mark("recent-mark")
            TKTrace.mark("just-before-hang")

            // The hang: the watchdog reports it after 200 ms, and its report writes the dump.
            let result = SharedBox<String?>(nil)
            TKDispatchQueue(label: "flight.hang").async(group: group) {
                result.value = waitForDump(in: directory, deadline: .now + .seconds(60))
            }
            group.wait()
            guard let dumped = result.value else {
                Console.err("no complete flight dump appeared in \(directory) within 60 s")
                return 1
            }
            Console.out("dumped \(dumped)")
            return 0
        },
        ChildRole(name: "flight-memory-bound", usage: "DIR WAVES") { arguments in
            guard arguments.count == 2, let waves = Int(arguments[1]), waves > 1 else { return 2 }
            TKTrace.startFlightRecorder(window: .milliseconds(200), capacity: 1024, totalCapacity: 8192)
            let before = TraceRoles.peakResidentKilobytes()
            let started = ContinuousClock.now
            for wave in 0..<waves {
                var threads: [TKThread] = []
                for _ in 0..<8 {
                    let thread = TKThread(name: "wave-\(wave)") {
                        for _ in 0..<20_000 { TKTrace.mark("wave \(wave)") }
                    }
                    thread.isDetached = false
                    thread.start()
                    threads.append(thread)
                }
                for thread in threads { thread.join() }
                if wave == 0 { TKThread.sleep(until: started + .milliseconds(300)) }
                Console.out("memory \(wave) \(TKTrace.recorderMemory)")
            }
            Console.out("rss-growth \(TraceRoles.peakResidentKilobytes() - before)")
            do {
                let (json, html) = try TKTrace.dumpFlight(to: arguments[0])
                Console.out("dumped \(json) \(html)")
            } catch {
                Console.err("\(error)")
                return 1
            }
            return 0
        },
        ChildRole(name: "flight-misuse", usage: "") { _ in
            guard TKTrace.isFlightRecording else { return 1 }
            TKTrace.mark("before-misuse")
            TKDiagnostics.hangThreshold = .zero
            return 0
        },
    ]

    /// "JSON HTML" of the first complete dump in `directory` (its HTML ends with </html>), or nil
    /// at the deadline.
    static func waitForDump(in directory: String, deadline: ContinuousClock.Instant) -> String? {
        while ContinuousClock.now < deadline {
            if let dir = opendir(directory) {
                defer { closedir(dir) }
                while let entry = readdir(dir) {
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                    guard name.hasPrefix("threadkit-flight-"), name.hasSuffix(".html") else { continue }
                    let html = directory + "/" + name
                    if fileEnds(html, with: "</html>") { return "\(html.dropLast(5)).json \(html)" }
                }
            }
            TKThread.sleep(for: .milliseconds(10))
        }
        return nil
    }

    private static func fileEnds(_ path: String, with suffix: String) -> Bool {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let size = lseek(fd, 0, SEEK_END)
        guard size >= suffix.utf8.count else { return false }
        var buffer = [UInt8](repeating: 0, count: suffix.utf8.count)
        guard pread(fd, &buffer, buffer.count, size - off_t(buffer.count)) == buffer.count else { return false }
        return buffer == Array(suffix.utf8)
    }
}
