// GLibRoles: the child processes of ThreadKitGLibTests. Each runs a real GLib main loop (or a
// ThreadKit loop driving a GMainContext), prints what ran as lines the test judges, and exits.
//   glib-all-work        g_main_loop_run on the main thread, TKRunLoop.main attached: every kind of
//                        ThreadKit work once ("ran KIND"), then quit
//   glib-remove          the same, then the source removed: posted work must not run from GLib
//                        ("after-remove N"), the source is released, ThreadKit's own loop runs it all
//   glib-drive-context   a TKThread's loop drives a new GMainContext: GLib timeouts and descriptor
//                        watches run on that thread
//   glib-idle            attached, work done, then idle for 1 s: process CPU printed ("idle-cpu-us N")
//   glib-wrong-thread    TKRunLoop.main's source iterated on another thread: a misuse that stops
// Main thread unless said otherwise.
#if GLib
    import CGLib
    import ChildProcessRoles
    import Dispatch
    import Glibc
    import ThreadKit
    import ThreadKitGLib

    enum GLibRoles {
        static let all: [ChildRole] = [
            ChildRole(name: "glib-all-work", usage: "(ThreadKit work under g_main_loop_run, each kind once)") { _ in allWork() },
            ChildRole(name: "glib-remove", usage: "(the source removed: nothing more runs from GLib)") { _ in removal() },
            ChildRole(name: "glib-drive-context", usage: "(a ThreadKit loop drives a GMainContext)") { _ in driveContext() },
            ChildRole(name: "glib-idle", usage: "(process CPU while attached and idle for 1 s)") { _ in idle() },
            ChildRole(name: "glib-wrong-thread", usage: "(the main loop's source iterated off the main thread: misuse)") { _ in
                wrongThread()
            },
        ]
    }

    /// What ran, in order. Appended to on the main thread only (checked: an append elsewhere is
    /// counted in `offMainThread` instead).
    final class MainLog: @unchecked Sendable {
        // safety: `entries` and `offMainThread` are touched on the main thread only (record checks).
        private(set) var entries: [String] = []
        private(set) var offMainThread = 0
        let expected: Int
        private let mainLoop: OpaquePointer?

        init(expected: Int, quitting mainLoop: OpaquePointer?) {
            self.expected = expected
            self.mainLoop = mainLoop
        }

        func record(_ kind: String) {
            guard TKThread.isMainThread else {
                offMainThread += 1
                return
            }
            entries.append(kind)
            if entries.count == expected, let mainLoop { g_main_loop_quit(mainLoop) }
        }
    }

    /// Process CPU (user + system) in microseconds.
    func processCPUMicroseconds() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
    }

    /// A delegate that records each message's msgid.
    final class RecordingDelegate: TKPortDelegate, @unchecked Sendable {
        let log: MainLog
        init(_ log: MainLog) { self.log = log }
        func handlePortMessage(_ message: TKPortMessage) { log.record("port-\(message.msgid)") }
    }

    /// Everything a GLib-hosted main loop must serve, posted once each; `log` records each run.
    /// Returns what keeps the pieces alive until the caller is done.
    func postEveryKind(_ log: MainLog) -> [AnyObject] {
        let main = TKRunLoop.main
        // Timers: added out of date order, fire in date order.
        main.add(
            TKTimer(fireAt: .now + .milliseconds(30), interval: .zero, repeats: false) { _ in
                log.record("timer-30ms")
                // Last, from a GLib callback on the main thread with nothing else pending: a
                // perform that writes no wake-up (the loop's own thread). Only the source's prepare
                // asking the loop can see it; else GLib sleeps until the hang guard.
                GLibCall.idle {
                    main.perform { log.record("perform-same-thread") }
                    return false
                }
            }, forMode: .common)
        main.add(
            TKTimer(fireAt: .now + .milliseconds(10), interval: .zero, repeats: false) { _ in log.record("timer-10ms") }, forMode: .common)
        // A descriptor source on a pipe another thread writes to.
        var ends: [Int32] = [0, 0]
        _ = pipe(&ends)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let descriptor = TKFileDescriptorSource(fileDescriptor: readEnd, closeOnInvalidate: true) { source, _ in
            var byte: UInt8 = 0
            _ = read(readEnd, &byte, 1)
            log.record("fd")
            source.invalidate()
        }
        main.add(descriptor, forMode: .common)
        descriptor.enableCallBacks(.read)
        // A port on the main loop.
        let port = TKMessagePort()
        let delegate = RecordingDelegate(log)
        port.delegate = delegate
        main.add(port, forMode: .common)
        TKThread.detachNewThread(name: "glib-poster") {
            main.perform { log.record("perform-1") }
            main.perform { log.record("perform-2") }
            TKDispatchQueue.main.async { log.record("tkmain-1") }
            TKDispatchQueue.main.async { log.record("tkmain-2") }
            DispatchQueue.main.async { log.record("gcdmain-1") }
            DispatchQueue.main.async { log.record("gcdmain-2") }
            for id in [1, 2] as [UInt32] {
                let message = TKPortMessage(sendPort: port, receivePort: nil, components: [])
                message.msgid = id
                _ = message.send(before: .now + .seconds(10))
            }
            var one: UInt8 = 1
            _ = write(writeEnd, &one, 1)
            close(writeEnd)
        }
        Task.detached { await MainActor.run { log.record("mainactor") } }
        return [port, delegate, descriptor]
    }

    /// The kinds `postEveryKind` posts.
    let everyKindCount = 13

    /// Quits `loop` after `seconds` (a guard against a hang), printing why.
    func guardAgainstHang(_ loop: OpaquePointer?, seconds: UInt32) {
        GLibCall.timeout(seconds * 1_000) {
            Console.out("hang-guard fired")
            g_main_loop_quit(loop)
            return false
        }
    }

    func allWork() -> Int32 {
        let loop = g_main_loop_new(nil, 0)
        let source = TKGLibRunLoopSource()
        let log = MainLog(expected: everyKindCount, quitting: loop)
        let keep = postEveryKind(log)
        guardAgainstHang(loop, seconds: 30)
        g_main_loop_run(loop)
        for entry in log.entries { Console.out("ran \(entry)") }
        Console.out("off-main-thread \(log.offMainThread)")
        source.remove()
        withExtendedLifetime(keep) {}
        g_main_loop_unref(loop)
        return 0
    }

    func removal() -> Int32 {
        let loop = g_main_loop_new(nil, 0)
        var source: TKGLibRunLoopSource? = TKGLibRunLoopSource()
        // First show it serves: one main-queue block through GLib.
        let first = MainLog(expected: 1, quitting: loop)
        DispatchQueue.main.async { first.record("before-remove") }
        guardAgainstHang(loop, seconds: 30)
        g_main_loop_run(loop)
        Console.out("served \(first.entries.count)")
        weak let released = source
        source?.remove()
        source = nil
        Console.out("released \(released == nil)")
        // Now every kind again: none may run from GLib. GLib runs 300 ms (an absence can only be
        // judged over a bounded time), with its CPU measured: a removed source must leave nothing
        // readable in GLib's poll.
        let log = MainLog(expected: everyKindCount, quitting: nil)
        let keep = postEveryKind(log)
        let quiet = g_main_loop_new(nil, 0)
        GLibCall.timeout(300) {
            g_main_loop_quit(quiet)
            return false
        }
        let cpuBefore = processCPUMicroseconds()
        g_main_loop_run(quiet)
        Console.out("after-remove \(log.entries.count)")
        Console.out("after-remove-cpu-us \(processCPUMicroseconds() - cpuBefore)")
        // Nothing was lost: ThreadKit's own loop runs all of it (the GLib idle perform included).
        let deadline = ContinuousClock.now + .seconds(30)
        while log.entries.count < everyKindCount && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: min(deadline, .now + .milliseconds(100)))
            // The same-thread perform is posted by a GLib idle: let GLib run it.
            while g_main_context_iteration(nil, 0) != 0 {}
        }
        Console.out("ran-by-threadkit \(log.entries.count)")
        withExtendedLifetime(keep) {}
        g_main_loop_unref(quiet)
        g_main_loop_unref(loop)
        return 0
    }

    /// A `GMainContext *` handed to another thread (GLib's contexts are thread-safe objects).
    final class GLibContext: @unchecked Sendable {
        // safety: immutable; GLib locks the context itself.
        let pointer: OpaquePointer?
        init(_ pointer: OpaquePointer?) { self.pointer = pointer }
    }

    /// State of the drive-context role, touched on the loop thread only (checked per callback).
    final class DriveState: @unchecked Sendable {
        // safety: written by GLib callbacks on the driving thread; read by main after joining it.
        var events: [String] = []
        var offThread = 0
        var driver: TKGLibContextDriver?
        var thread: TKThread?
        var done = false
    }

    func driveContext() -> Int32 {
        var ends: [Int32] = [0, 0]
        _ = pipe(&ends)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let state = DriveState()
        let ready = TKDispatchSemaphore(value: 0)
        let context = GLibContext(g_main_context_new())
        let thread = TKThread(name: "glib-driver") {
            let me = TKThread.current
            state.thread = me
            func note(_ event: String) {
                if TKThread.current !== me { state.offThread += 1 }
                state.events.append(event)
                if state.events.count == 5 {
                    state.driver?.invalidate()
                    state.done = true
                }
            }
            do {
                state.driver = try TKGLibContextDriver(context: context.pointer)
            } catch {
                Console.out("driver-error \(error)")
                ready.signal()
                return
            }
            GLibCall.timeout(30, on: context.pointer) {
                note("timeout-30ms")
                return false
            }
            var ticks = 0
            GLibCall.timeout(5, on: context.pointer) {
                ticks += 1
                note("tick-\(ticks)")
                return ticks < 3
            }
            GLibCall.watch(readEnd, G_IO_IN, on: context.pointer) { condition in
                var byte: UInt8 = 0
                _ = read(readEnd, &byte, 1)
                note("watch-\(condition.rawValue & G_IO_IN.rawValue != 0 ? "in" : "?")")
                return false
            }
            ready.signal()
            let deadline = ContinuousClock.now + .seconds(30)
            while !state.done && ContinuousClock.now < deadline {
                TKRunLoop.current.run(mode: .default, before: deadline)
            }
        }
        thread.isDetached = false
        thread.start()
        ready.wait()
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
        thread.join()
        for event in state.events { Console.out("event \(event)") }
        Console.out("off-thread \(state.offThread)")
        Console.out("valid-after \(state.driver?.isValid ?? true)")
        // The driver released the context: this thread may own it now.
        Console.out("acquirable \(g_main_context_acquire(context.pointer) != 0)")
        g_main_context_release(context.pointer)
        close(readEnd)
        close(writeEnd)
        return 0
    }

    func idle() -> Int32 {
        let loop = g_main_loop_new(nil, 0)
        let source = TKGLibRunLoopSource()
        // Work first, so every descriptor that can turn readable has been, and was drained.
        let log = MainLog(expected: everyKindCount, quitting: loop)
        let keep = postEveryKind(log)
        guardAgainstHang(loop, seconds: 30)
        g_main_loop_run(loop)
        Console.out("ran \(log.entries.count)")
        // Then idle, 1 s by GLib's clock.
        let quiet = g_main_loop_new(nil, 0)
        GLibCall.timeout(1_000) {
            g_main_loop_quit(quiet)
            return false
        }
        let cpuBefore = processCPUMicroseconds()
        g_main_loop_run(quiet)
        Console.out("idle-cpu-us \(processCPUMicroseconds() - cpuBefore)")
        source.remove()
        withExtendedLifetime(keep) {}
        return 0
    }

    func wrongThread() -> Int32 {
        let context = GLibContext(g_main_context_new())
        _ = TKGLibRunLoopSource(runLoop: .main, context: context.pointer)
        let thread = TKThread(name: "not-main") {
            _ = g_main_context_iteration(context.pointer, 0)
        }
        thread.isDetached = false
        thread.start()
        thread.join()
        Console.out("iterated without stopping")
        return 0
    }
#endif
