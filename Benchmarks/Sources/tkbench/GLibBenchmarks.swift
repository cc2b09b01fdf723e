// GLibBenchmarks: ThreadKit run by a GLib main loop (ThreadKitGLib, docs/GLib.md; issue 28):
//   - a @MainActor round trip (`await MainActor.run {}` from a detached task) while the main thread
//     runs g_main_loop_run with TKRunLoop.main attached (TKGLibRunLoopSource), against the same
//     while the main thread runs TKRunLoop.main.run(): target ≤ 1.2×. Each side in a fresh child
//     process (the main thread must run the loop from the start);
//   - the CPU an idle process burns over 1 s: g_main_loop_run with ThreadKit attached (after one
//     round of work, so every descriptor that can turn readable has been), GLib alone, and
//     TKRunLoop.main.run(): target ≤ 1 ms CPU per second (0.1% of a core). Fresh processes too.
// The children: `tkbench glib-mainactor-child KIND N`, `tkbench glib-idle-child KIND 1`.
// Built only with this package's trait GLib (it needs libglib2.0-dev); without it the group says
// what to install and is skipped, as the postgres group is without a server.
import Foundation

#if GLib
    import CGLib
    import Dispatch
    import ThreadKit
    import ThreadKitGLib

    enum GLibBenchmarks {
        static func rows() -> [Row] {
            [
                Row(
                    group: "glib", name: "@MainActor round trip from a detached task, fresh process (await MainActor.run {})",
                    operations: 20_000, unit: .microseconds,
                    contenders: [
                        ConcurrencyBenchmarks.childContender("g_main_loop_run + TKGLibRunLoopSource", ["glib-mainactor-child", "glib"]),
                        ConcurrencyBenchmarks.childContender("TKRunLoop.main.run()", ["glib-mainactor-child", "tk"]),
                    ], reference: "TKRunLoop.main.run()", target: "≤ 1.2×"),
                Row(
                    group: "glib", name: "CPU of an idle process over 1 s, fresh process", operations: 1, unit: .millisecondsPerSecond,
                    contenders: [
                        ConcurrencyBenchmarks.childContender("g_main_loop_run + TKGLibRunLoopSource", ["glib-idle-child", "glib"]),
                        ConcurrencyBenchmarks.childContender("g_main_loop_run alone", ["glib-idle-child", "plain"]),
                        ConcurrencyBenchmarks.childContender("TKRunLoop.main.run()", ["glib-idle-child", "tk"]),
                    ], reference: "g_main_loop_run alone", target: "≤ 1 ms CPU/s (0.1% of a core)"),
            ]
        }

        /// The round-trip child: as ConcurrencyBenchmarks.mainActorChild, with the main thread in
        /// g_main_loop_run (`glib`) or TKRunLoop.main.run() (`tk`). Prints the nanoseconds.
        static func mainActorChild(_ kind: String, _ n: Int) -> Int32 {
            ConcurrencyBenchmarks.startMainActorRoundTrips(n)
            if kind == "glib" {
                let source = TKGLibRunLoopSource()
                g_main_loop_run(g_main_loop_new(nil, 0))
                source.remove()
            } else {
                TKRunLoop.main.run()
            }
            return 1
        }

        /// The idle child: one round of main-queue work, then 1 s of idling; prints CPU ms per second.
        static func idleChild(_ kind: String) -> Int32 {
            let second: Duration = .seconds(1)
            func cpuMilliseconds() -> Double {
                var usage = rusage()
                getrusage(RUSAGE_SELF.rawValue, &usage)
                let us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
                return Double(us) / 1000
            }
            var source: TKGLibRunLoopSource?
            if kind == "tk" {
                TKRunLoop.main.add(TKRunLoopSource {}, forMode: .common) // keeps the loop running
                DispatchQueue.main.async { TKRunLoop.main.stop() }
                TKRunLoop.main.run()
                let before = cpuMilliseconds()
                TKRunLoop.main.run(until: .now + second)
                print(cpuMilliseconds() - before)
                return 0
            }
            if kind == "glib" { source = TKGLibRunLoopSource() }
            let loop = g_main_loop_new(nil, 0)
            func runFor(_ ms: UInt32) {
                // safety: the loop outlives the run; the callback quits it once and removes itself.
                g_timeout_add_full(
                    0, ms,
                    { loop in
                        g_main_loop_quit(OpaquePointer(loop))
                        return 0
                    }, UnsafeMutableRawPointer(loop), nil)
                g_main_loop_run(loop)
            }
            if kind == "glib" {
                DispatchQueue.main.async { TKDispatchQueue.main.async {} }
                runFor(50)
            }
            let before = cpuMilliseconds()
            runFor(1_000)
            print(cpuMilliseconds() - before)
            source?.remove()
            return 0
        }
    }
#else
    enum GLibBenchmarks {
        static let skipped =
            "glib: skipped — tkbench was built without the GLib trait. Install GLib's headers "
            + "(apt-get install libglib2.0-dev) and build with "
            + "`swift run -c release --package-path Benchmarks --traits GLib tkbench glib`.\n"

        static func rows() -> [Row] {
            print(skipped)
            return []
        }

        static func mainActorChild(_ kind: String, _ n: Int) -> Int32 {
            FileHandle.standardError.write(Data(skipped.utf8))
            return 2
        }

        static func idleChild(_ kind: String) -> Int32 { mainActorChild(kind, 0) }
    }
#endif
