// GLibScenario: a GLib main loop serving ThreadKit (docs/GLib.md). The main thread runs a real
// GMainLoop (g_main_loop_run); TKRunLoop.main is attached to its context as one GSource
// (TKGLibRunLoopSource). Six kinds of ThreadKit work are posted, each once — a TKTimer, a
// TKFileDescriptorSource on a pipe, a TKMessagePort message, a TKDispatchQueue.main block, a
// DispatchQueue.main block, a @MainActor job — and each must run exactly once, on the main thread,
// from inside g_main_loop_run; the last one quits the loop. Then the source is removed and the
// process's CPU over 0.3 s of GLib idling is measured. Main thread only.
#if GLib
    import CGLib
    import ChildProcessRoles
    import Dispatch
    import Glibc
    import ThreadKit
    import ThreadKitGLib

    /// What ran, in order; appended to on the main thread only (checked).
    final class TourLog: @unchecked Sendable {
        // safety: `entries`/`offMain` are touched on the main thread only (`record` checks).
        private(set) var entries: [(kind: String, at: Duration)] = []
        private(set) var offMain = 0
        private let start = ContinuousClock.now
        let loop: OpaquePointer?
        let expected: Int
        init(_ loop: OpaquePointer?, expected: Int) {
            self.loop = loop
            self.expected = expected
        }

        func record(_ kind: String) {
            guard TKThread.isMainThread else {
                offMain += 1
                return
            }
            entries.append((kind, ContinuousClock.now - start))
            if entries.count == expected, let loop { g_main_loop_quit(loop) }
        }
    }

    // safety: holds only an immutable reference to the log, which checks its own thread.
    final class TourPortDelegate: TKPortDelegate, @unchecked Sendable {
        let log: TourLog
        init(_ log: TourLog) { self.log = log }
        func handlePortMessage(_ message: TKPortMessage) { log.record("port message (TKMessagePort)") }
    }

    /// `d` as milliseconds with one decimal: "20.3 ms".
    func milliseconds(_ d: Duration) -> String {
        let tenths = (d.components.seconds * 10_000) + d.components.attoseconds / 100_000_000_000_000
        return "\(tenths / 10).\(tenths % 10) ms"
    }

    func processCPUMicroseconds() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
    }

    enum GLibScenario {
        static let kinds = [
            "TKTimer", "TKFileDescriptorSource", "port message (TKMessagePort)", "TKDispatchQueue.main", "DispatchQueue.main",
            "@MainActor job",
        ]

        static let scenario = Scenario(
            name: "glib-main-loop", title: "g_main_loop_run serves ThreadKit, Dispatch's main queue and the main actor",
            source: "issue 28 (GTK/GLib programs: swift-cross-ui #140, libgodot #5); docs/GLib.md"
        ) { say in
            let loop = g_main_loop_new(nil, 0)
            defer { g_main_loop_unref(loop) }
            let source = TKGLibRunLoopSource()
            say.say(
                "TKGLibRunLoopSource(): TKRunLoop.main attached to GLib's default context as one GSource (poll descriptor \(TKRunLoop.main.pollDescriptor))"
            )
            let log = TourLog(loop, expected: kinds.count)
            let main = TKRunLoop.main
            main.add(
                TKTimer(fireAt: .now + .milliseconds(20), interval: .zero, repeats: false) { _ in log.record("TKTimer") }, forMode: .common)
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw ScenarioFailure("pipe() failed: \(String(cString: strerror(errno)))") }
            let (readEnd, writeEnd) = (ends[0], ends[1])
            let descriptor = TKFileDescriptorSource(fileDescriptor: readEnd, closeOnInvalidate: true) { fdSource, _ in
                var byte: UInt8 = 0
                _ = read(readEnd, &byte, 1)
                log.record("TKFileDescriptorSource")
                fdSource.invalidate()
            }
            main.add(descriptor, forMode: .common)
            descriptor.enableCallBacks(.read)
            let port = TKMessagePort()
            let delegate = TourPortDelegate(log)
            port.delegate = delegate
            main.add(port, forMode: .common)
            say.say("posted from a background thread: a pipe byte, a port message, TKDispatchQueue.main.async, DispatchQueue.main.async;")
            say.say("from a detached task: await MainActor.run { … }; on the main loop: a TKTimer due in 20 ms")
            TKThread.detachNewThread(name: "tour-poster") {
                var one: UInt8 = 1
                _ = write(writeEnd, &one, 1)
                close(writeEnd)
                _ = TKPortMessage(sendPort: port, receivePort: nil, components: []).send(before: .now + .seconds(10))
                TKDispatchQueue.main.async { log.record("TKDispatchQueue.main") }
                DispatchQueue.main.async { log.record("DispatchQueue.main") }
            }
            Task.detached { await MainActor.run { log.record("@MainActor job") } }
            var hung = false
            GLibCall.timeout(30_000) {
                hung = true
                g_main_loop_quit(loop)
                return false
            }
            say.say("main thread: g_main_loop_run(loop) — GLib's loop, not ThreadKit's")
            g_main_loop_run(loop)
            for (kind, at) in log.entries {
                say.say("  ran on the main thread, inside g_main_loop_run: \(Console.padded(kind, 30)) at \(milliseconds(at))")
            }
            try say.check(!hung, "only \(log.entries.count) of \(kinds.count) kinds ran within 30 s: \(log.entries.map(\.kind))")
            try say.check(log.offMain == 0, "\(log.offMain) ran off the main thread")
            let ran = log.entries.map(\.kind)
            try say.check(ran.sorted() == kinds.sorted(), "expected each kind once, ran \(ran)")
            say.say("all \(kinds.count) kinds ran exactly once; the last one called g_main_loop_quit")

            source.remove()
            let quiet = g_main_loop_new(nil, 0)
            defer { g_main_loop_unref(quiet) }
            let late = TourLog(nil, expected: 1)
            DispatchQueue.main.async { late.record("DispatchQueue.main") }
            GLibCall.timeout(300) {
                g_main_loop_quit(quiet)
                return false
            }
            let cpu = processCPUMicroseconds()
            g_main_loop_run(quiet)
            let used = processCPUMicroseconds() - cpu
            say.say(
                "source.remove(), then a DispatchQueue.main block and 0.3 s of g_main_loop_run: ran \(late.entries.count) (GLib no longer serves ThreadKit), process CPU \(used) µs"
            )
            try say.check(late.entries.isEmpty, "work ran from GLib after the source was removed")
            TKRunLoop.main.run(mode: .default, before: .now + .seconds(10))
            say.say("TKRunLoop.main.run(mode:before:) then runs it: \(late.entries.count) (nothing was lost)")
            try say.check(late.entries.count == 1, "the block posted after removal was lost")
            withExtendedLifetime((port, delegate)) {}
            return
                "6 kinds of ThreadKit work ran exactly once each on the main thread under g_main_loop_run; removing the source stopped it cleanly"
        }
    }
#endif
