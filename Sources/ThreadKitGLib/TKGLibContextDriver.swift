// TKGLibContextDriver: the other way round from TKGLibRunLoopSource — a ThreadKit loop thread runs
// a GMainContext (docs/GLib.md §2), so GLib sources (timeouts, I/O watches, idles, GTask results)
// attached to that context run on the loop's thread while the loop runs. GLib's own iteration
// (prepare → query → poll → check → dispatch, as g_main_context_iteration does it) is split over
// the loop's pass:
//   1. prepare + query (`prepareAndQuery`): GLib's descriptors become TKFileDescriptorSources on
//      the loop (one per descriptor, events merged; re-armed each iteration: they are one-shot),
//      GLib's timeout a one-shot TKTimer; "ready now" (timeout 0) signals the step source at once;
//   2. the loop sleeps in its own epoll_wait; a ready descriptor's callback records its exact
//      revents (poll(2) with timeout 0) and signals the step source, the timer signals it too;
//   3. the step source performs `step()`: check with those revents, dispatch if GLib says so, then
//      1 again.
// A beforeWaiting observer checks and re-prepares before each sleep of the loop, so GLib sources
// attached on this thread meanwhile (which send GLib no wake-up) are seen; if GLib has something to
// dispatch it signals the step source and wakes the loop instead of sleeping.
// Descriptor numbers: GLib code run by dispatch may close a descriptor and open another with the
// same number; every descriptor source is invalidated before dispatch, so none outlives its number.
//
// Threads: everything runs on the loop's thread (init and invalidate are checked there; the
// callbacks are the loop's). The fields below are loop-thread only. The context is acquired
// (g_main_context_acquire) for the driver's life: no other thread may iterate it meanwhile.
#if GLib
    import CGLib
    import Glibc
    import ThreadKit

    // safety: the mutable state is touched on the loop's thread only (made and invalidated there,
    // driven by its sources); the rest is immutable.
    /// Runs a GLib `GMainContext` on a ThreadKit run loop's thread: while the loop runs, GLib's
    /// timeouts, I/O watches and idle sources attached to the context are dispatched on that
    /// thread, GLib's descriptors watched as `TKFileDescriptorSource`s and its timeout kept as a
    /// `TKTimer` (docs/GLib.md). The driver acquires the context for its life: no other thread
    /// may iterate it until `invalidate()`.
    ///
    /// Make it and invalidate it on the loop's thread. The loop keeps the driver (through its
    /// source, observer and timer) until `invalidate()`.
    public final class TKGLibContextDriver: @unchecked Sendable {
        /// The loop whose thread runs the context.
        public let runLoop: TKRunLoop
        /// The mode the driver's source, observer, descriptors and timer are in (`.common` by
        /// default: every common mode of the loop).
        public let mode: TKRunLoop.Mode
        /// The context driven (`GMainContext *`), referenced until `invalidate()`.
        public let context: OpaquePointer

        private enum Phase {
            /// Nothing prepared: the next step prepares.
            case idle
            /// Prepared and queried with this priority; GLib waits for `fds` to be polled.
            case polling(maxPriority: Int32)
            /// Checked: GLib has sources to dispatch.
            case ready
            /// `invalidate()` ran.
            case invalidated
        }
        private var phase = Phase.idle
        /// GLib's poll records from the last query (their `revents` filled before check).
        private var fds: [GPollFD] = []
        /// The descriptor sources, by descriptor, and the callback types armed on each.
        private var watchers: [Int32: (source: TKFileDescriptorSource, armed: TKFileDescriptorSource.CallBackTypes)] = [:]
        /// revents seen for each descriptor since the last check.
        private var fired: [Int32: Int16] = [:]
        /// The timer for GLib's timeout and its fire date.
        private var timer: TKTimer?
        private var timerDate: ContinuousClock.Instant?
        /// The source whose perform is `step()`, and the observer that re-prepares before sleeps.
        private var stepSource: TKRunLoopSource!
        private var observer: TKRunLoopObserver!
        /// True while `step()` is inside g_main_context_dispatch.
        private var dispatching = false
        /// The thread that made the driver (the loop's), for checks.
        private let thread: TKThread

        /// Starts driving `context` (a `GMainContext *`; nil: GLib's default context) on
        /// `runLoop`, which must be the calling thread's loop (a misuse that stops the process
        /// otherwise). Throws `TKError(.invalidArgument)` when another thread owns the context
        /// (it is being iterated there, e.g. by `g_main_loop_run`).
        public init(context: OpaquePointer? = nil, runLoop: TKRunLoop = .current, mode: TKRunLoop.Mode = .common) throws {
            guard runLoop === TKRunLoop.current else {
                TKGLibMisuse.stop(
                    "TKGLibContextDriver(context:runLoop:) made on a thread that does not own the run loop: only the loop's "
                        + "thread may drive a GMainContext through it. Fix: make the driver on the loop's own thread "
                        + "(e.g. in a perform block sent there).")
            }
            let ctx = context ?? g_main_context_default()!
            guard g_main_context_acquire(ctx) != 0 else {
                throw TKError(
                    .invalidArgument,
                    "TKGLibContextDriver: the GMainContext is owned by another thread (it is being iterated there, e.g. by "
                        + "g_main_loop_run): a context runs on one thread at a time. Fix: stop iterating it there first, or "
                        + "give this loop a context of its own (g_main_context_new).")
            }
            g_main_context_ref(ctx)
            self.context = ctx
            self.runLoop = runLoop
            self.mode = mode
            thread = TKThread.current
            // The loop holds these, and they hold the driver, until `invalidate()`.
            stepSource = TKRunLoopSource { [self] in step() }
            observer = TKRunLoopObserver(activities: .beforeWaiting) { [self] _, _ in beforeWaiting() }
            runLoop.add(stepSource, forMode: mode)
            runLoop.add(observer, forMode: mode)
            requestStep()
        }

        deinit {
            // Reached without `invalidate()` only when the loop let go (its thread ended, on that
            // thread): the context is released so another thread may iterate it.
            if isValid { releaseContext() }
        }

        /// Stops driving the context: GLib's descriptors leave the loop, the timer is invalidated
        /// and the context is released (another thread may iterate it again). On the loop's thread
        /// (a misuse otherwise); a second call does nothing. Safe inside a GLib callback the driver
        /// dispatched.
        public func invalidate() {
            checkThread("invalidate()")
            if case .invalidated = phase { return }
            phase = .invalidated
            dropWatchers()
            timer?.invalidate()
            timer = nil
            stepSource.invalidate()
            observer.invalidate()
            fds = []
            // Inside a callback `step()` dispatched, GLib still uses the context: `step` lets go of
            // it once g_main_context_dispatch returns.
            if !dispatching { releaseContext() }
        }

        private func releaseContext() {
            g_main_context_release(context)
            g_main_context_unref(context)
        }

        /// Whether `invalidate()` has not been called yet. Loop thread.
        public var isValid: Bool {
            if case .invalidated = phase { return false }
            return true
        }

        // MARK: The iteration

        /// The step source's work: check what the poll found, dispatch, prepare the next iteration.
        private func step() {
            if case .polling = phase { check() }
            if case .ready = phase {
                phase = .idle
                // GLib code runs now and may close descriptors: none of ours may outlive its number.
                dropWatchers()
                dispatching = true
                g_main_context_dispatch(context)
                dispatching = false
                if case .invalidated = phase {
                    releaseContext() // invalidated by a callback just dispatched
                    return
                }
            }
            guard case .idle = phase else { return }
            prepareAndQuery()
        }

        /// Before the loop sleeps: let GLib look again (sources attached on this thread meanwhile).
        private func beforeWaiting() {
            switch phase {
            case .polling:
                check()
                if case .ready = phase { requestStep() } else { prepareAndQuery() }
            case .idle: prepareAndQuery()
            case .ready, .invalidated: return
            }
        }

        /// g_main_context_check with the revents the descriptor callbacks recorded.
        private func check() {
            guard case .polling(let maxPriority) = phase else { return }
            for i in fds.indices {
                let seen = fired[fds[i].fd] ?? 0
                fds[i].revents = UInt16(bitPattern: seen) & (fds[i].events | TKGLibContextDriver.alwaysReported)
            }
            fired.removeAll(keepingCapacity: true)
            let ready = fds.withUnsafeMutableBufferPointer { buffer in
                g_main_context_check(context, maxPriority, buffer.baseAddress, Int32(buffer.count))
            }
            phase = ready != 0 ? .ready : .idle
        }

        /// g_main_context_prepare and query; watch GLib's descriptors and arm its timeout.
        private func prepareAndQuery() {
            var maxPriority: Int32 = 0
            let readyNow = g_main_context_prepare(context, &maxPriority) != 0
            var timeout: Int32 = -1
            var count = Int32(0)
            while true {
                count = fds.withUnsafeMutableBufferPointer { buffer in
                    g_main_context_query(context, maxPriority, &timeout, buffer.baseAddress, Int32(buffer.count))
                }
                if Int(count) <= fds.count { break }
                fds = Array(repeating: GPollFD(), count: Int(count))
            }
            fds.removeLast(fds.count - Int(count))
            phase = .polling(maxPriority: maxPriority)
            watch()
            if readyNow || timeout == 0 {
                setTimer(nil)
                requestStep()
            } else {
                setTimer(timeout > 0 ? .now + .milliseconds(Int64(timeout)) : nil)
            }
        }

        /// Makes the descriptor sources match `fds`: one per descriptor, armed for its events.
        private func watch() {
            var wanted: [Int32: TKFileDescriptorSource.CallBackTypes] = [:]
            for record in fds {
                var types: TKFileDescriptorSource.CallBackTypes = []
                if record.events & TKGLibContextDriver.readEvents != 0 { types.insert(.read) }
                if record.events & UInt16(G_IO_OUT.rawValue) != 0 { types.insert(.write) }
                wanted[record.fd, default: []].formUnion(types)
            }
            for (fd, entry) in watchers where wanted[fd] == nil {
                entry.source.invalidate()
                watchers[fd] = nil
            }
            for (fd, types) in wanted where !types.isEmpty {
                if let entry = watchers[fd] {
                    let missing = types.subtracting(entry.armed)
                    guard !missing.isEmpty else { continue }
                    entry.source.enableCallBacks(missing)
                    watchers[fd] = (entry.source, entry.armed.union(missing))
                } else {
                    let source = TKFileDescriptorSource(fileDescriptor: fd) { [self] _, types in descriptorReady(fd, types) }
                    runLoop.add(source, forMode: mode)
                    source.enableCallBacks(types)
                    watchers[fd] = (source, types)
                }
            }
        }

        /// A descriptor source reported: record the descriptor's exact state for check.
        private func descriptorReady(_ fd: Int32, _ types: TKFileDescriptorSource.CallBackTypes) {
            guard isValid else { return }
            if let entry = watchers[fd] { watchers[fd] = (entry.source, entry.armed.subtracting(types)) }
            var probe = pollfd(fd: fd, events: Int16(bitPattern: TKGLibContextDriver.probeEvents), revents: 0)
            _ = poll(&probe, 1, 0)
            // A report with nothing to show now (consumed meanwhile) still gets GLib to look.
            fired[fd, default: 0] |= probe.revents
            requestStep()
        }

        private func dropWatchers() {
            for entry in watchers.values { entry.source.invalidate() }
            watchers.removeAll(keepingCapacity: true)
        }

        /// Keeps one TKTimer at `date` (nil: none). A timer already due within a millisecond of
        /// `date` is kept (GLib's timeouts are whole milliseconds, re-asked before every sleep): a
        /// slightly early step only finds nothing ready and prepares again.
        private func setTimer(_ date: ContinuousClock.Instant?) {
            if let date, let timerDate, timer?.isValid == true, date > timerDate - .milliseconds(1), date < timerDate + .milliseconds(1) {
                return
            }
            if date == nil && timer == nil { return }
            timer?.invalidate()
            timer = nil
            timerDate = date
            guard let date else { return }
            let made = TKTimer(fireAt: date, interval: .zero, repeats: false) { [self] _ in requestStep() }
            timer = made
            runLoop.add(made, forMode: mode)
        }

        /// Gets `step()` run in the loop's next pass without sleeping first.
        private func requestStep() {
            stepSource.signal()
            runLoop.wakeUp()
        }

        private func checkThread(_ call: String) {
            guard TKThread.current === thread else {
                TKGLibMisuse.stop(
                    "TKGLibContextDriver.\(call) called on a thread other than its run loop's: the driver's state belongs to "
                        + "that thread. Fix: call it there (e.g. in a perform block sent to the loop).")
            }
        }

        /// GLib's events that TKFileDescriptorSource's read readiness covers.
        static let readEvents = UInt16(G_IO_IN.rawValue | G_IO_PRI.rawValue | G_IO_HUP.rawValue | G_IO_ERR.rawValue)
        /// What poll(2) reports whether asked or not.
        static let alwaysReported = UInt16(G_IO_HUP.rawValue | G_IO_ERR.rawValue | G_IO_NVAL.rawValue)
        /// What the probe asks poll(2) for.
        static let probeEvents = UInt16(G_IO_IN.rawValue | G_IO_PRI.rawValue | G_IO_OUT.rawValue)
    }

    /// Stops the process after a misuse of ThreadKitGLib, with the message (as ThreadKit's own).
    enum TKGLibMisuse {
        static func stop(_ message: String, file: StaticString = #file, line: UInt = #line) -> Never {
            fatalError("ThreadKit misuse: \(message)", file: file, line: line)
        }
    }
#endif
