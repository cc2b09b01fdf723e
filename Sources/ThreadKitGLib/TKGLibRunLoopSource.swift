// TKGLibRunLoopSource: a TKRunLoop (usually TKRunLoop.main) run by a GLib main loop, as one GSource
// in a GMainContext (docs/GLib.md §1). GLib's iteration drives ThreadKit's embedding calls
// (TKRunLoop+Embedding):
//   prepare  → `nextWakeDeadline(forMode:)`: ready now (timeout 0) if work waits, else the timeout
//              to the next ThreadKit timer (ms, rounded up), else -1; it also arms the loop's
//              timerfd, so the polled descriptor turns readable at that deadline by itself;
//   poll     → GLib polls the loop's `pollDescriptor` (g_source_add_unix_fd, G_IO_IN) with its own;
//   check    → ready if the descriptor was readable or the deadline has come;
//   dispatch → `runOnce(mode:)`: one ThreadKit pass, never sleeping, which reads what made the
//              descriptor readable (no level-triggered spinning). The source stays (G_SOURCE_CONTINUE).
// No polling: between passes GLib sleeps in poll(2) until the descriptor is readable or the
// timeout expires.
//
// The callbacks are @convention(c) closures (GSourceFuncs wants C function pointers; they capture
// nothing and find their object through the owner slot CGLib's shim.h lays out after the GSource).
//
// Threads: GLib calls the callbacks on the thread iterating the context, which must be the loop's
// own (TKRunLoop checks it in each call: a misuse that stops the process otherwise). `remove()` and
// `isAttached` from any thread: `state` (a Mutex) guards the lifecycle; GLib's own lock guards
// g_source_destroy. Ownership: while attached, the GSource holds the object (an Unmanaged retain,
// released by `finalize` when GLib frees the source), so dropping the handle leaves it attached.
#if GLib
    import CGLib
    import Synchronization
    import ThreadKit

    // safety: the mutable state is touched on the loop's thread only; the rest is immutable.
    /// Runs a `TKRunLoop` from a GLib main loop (or GTK's): attached to a `GMainContext` as one
    /// `GSource`, it makes `g_main_loop_run` serve the loop's timers, sources, ports, perform
    /// blocks and — for `TKRunLoop.main` — `TKDispatchQueue.main`, `DispatchQueue.main` and
    /// `@MainActor` jobs, on the context's thread, with no polling (docs/GLib.md).
    ///
    /// Attach it on the loop's own thread, which must be the thread that iterates the context
    /// (for `TKRunLoop.main`: the main thread running `g_main_loop_run` on the default context).
    /// Each GLib iteration runs at most one ThreadKit pass, so GLib's sources and ThreadKit's
    /// work take turns. The source stays attached until `remove()` (or until the context is
    /// freed), even when this object is no longer referenced.
    public final class TKGLibRunLoopSource: @unchecked Sendable {
        /// The loop this source runs.
        public let runLoop: TKRunLoop
        /// The mode each pass runs. The default, `.default`, is a common mode: on the main loop its
        /// passes serve the main dispatch queues and the main actor.
        public let mode: TKRunLoop.Mode

        // safety: the GSource pointer is only used under `state`'s mutex (remove) and GLib's own
        // locking makes g_source_ref/destroy/unref callable from any thread.
        private enum Lifecycle: @unchecked Sendable {
            /// In a context; the pointer is GLib's source (the context holds it).
            case attached(UnsafeMutablePointer<GSource>)
            /// `remove()` destroyed it; GLib finalizes it once its last reference goes.
            case removed
            /// GLib finalized it (removed, or its context freed).
            case finalized
        }
        /// The lifecycle; any thread, under the mutex (taken with no GLib lock held by this code).
        private let state: Mutex<Lifecycle>
        /// The tag of the loop's descriptor in the GSource. Written once in init, before
        /// attaching (so before any callback reads it).
        nonisolated(unsafe) private var descriptorTag: UnsafeMutableRawPointer?

        /// Attaches `runLoop` to `context` (nil: GLib's default context, the one
        /// `g_main_loop_new(nil, …)` runs) with GLib priority `priority` (0 is G_PRIORITY_DEFAULT;
        /// lower runs first). Call it on the loop's thread; the context must be iterated on that
        /// thread too. `context` is a `GMainContext *` from any GLib binding.
        public init(
            runLoop: TKRunLoop = .main, mode: TKRunLoop.Mode = .default, context: OpaquePointer? = nil,
            priority: Int32 = 0
        ) {
            self.runLoop = runLoop
            self.mode = mode
            state = Mutex(.removed)
            // safety: the GSource holds one retain of self until GLib calls `finalize`, which
            // releases it; every callback runs while GLib holds the source, so the object is alive.
            let retained = Unmanaged.passRetained(self).toOpaque()
            let source = tk_glib_source_new(TKGLibRunLoopSource.funcs, retained)!
            g_source_set_name(source, "ThreadKit run loop")
            g_source_set_priority(source, priority)
            // A ThreadKit callback may run a nested GLib loop (a modal dialog): it keeps serving
            // ThreadKit, as a nested TKRunLoop run would.
            g_source_set_can_recurse(source, 1)
            descriptorTag = g_source_add_unix_fd(source, runLoop.pollDescriptor, G_IO_IN)
            state.withLock { $0 = .attached(source) }
            g_source_attach(source, context)
            // The context holds the source now: drop the reference g_source_new gave.
            g_source_unref(source)
        }

        /// Detaches the source: GLib runs no more ThreadKit passes for it, and frees it (releasing
        /// this object's hold on itself) once the context lets go. Work queued on the loop stays
        /// queued for whoever runs the loop next. Any thread; a second call does nothing.
        public func remove() {
            let source = state.withLock { s -> UnsafeMutablePointer<GSource>? in
                guard case .attached(let source) = s else { return nil }
                s = .removed
                // safety: still attached, so the context holds a reference: the pointer is valid.
                // Taken under the mutex so `finalize` (which needs it) cannot free it meanwhile.
                g_source_ref(source)
                return source
            }
            guard let source else { return }
            g_source_destroy(source)
            g_source_unref(source)
        }

        /// Whether the source is still in its context (false after `remove()`, or once GLib freed
        /// it with its context). Any thread.
        public var isAttached: Bool {
            state.withLock { if case .attached = $0 { return true } else { return false } }
        }

        // MARK: GSourceFuncs

        /// GLib's prepare: ready now, or the timeout (ms) to the loop's next deadline.
        private func prepare(_ timeout: UnsafeMutablePointer<Int32>?) -> Int32 {
            guard let deadline = runLoop.nextWakeDeadline(forMode: mode) else {
                timeout?.pointee = -1
                return 0
            }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else {
                timeout?.pointee = 0
                return 1
            }
            timeout?.pointee = TKGLibRunLoopSource.milliseconds(roundingUp: remaining)
            return 0
        }

        /// GLib's check, after its poll: the descriptor was readable, or the deadline came.
        private func check(_ source: UnsafeMutablePointer<GSource>) -> Int32 {
            if g_source_query_unix_fd(source, descriptorTag).rawValue & G_IO_IN.rawValue != 0 { return 1 }
            guard let deadline = runLoop.nextWakeDeadline(forMode: mode) else { return 0 }
            return deadline <= ContinuousClock.now ? 1 : 0
        }

        /// GLib's dispatch: one ThreadKit pass; the source stays.
        private func dispatch() -> Int32 {
            runLoop.runOnce(mode: mode)
            return 1 // G_SOURCE_CONTINUE
        }

        /// GLib's finalize: the source is being freed (removed, or its context freed).
        private func finalized() {
            state.withLock { $0 = .finalized }
        }

        /// A duration in whole milliseconds, rounded up (never early), capped at Int32.max.
        static func milliseconds(roundingUp duration: Duration) -> Int32 {
            let (seconds, attoseconds) = duration.components
            let ms = seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
            return Int32(clamping: ms)
        }

        /// The object a GSource of ours belongs to.
        private static func owner(_ source: UnsafeMutablePointer<GSource>?) -> TKGLibRunLoopSource {
            // safety: every GSource these funcs see was made by `tk_glib_source_new` with a retained
            // reference to its object in the owner slot, released only in `finalize` below.
            Unmanaged<TKGLibRunLoopSource>.fromOpaque(tk_glib_source_owner(source)!).takeUnretainedValue()
        }

        /// The callbacks, in storage GLib may keep pointing at for the life of the process.
        // safety: initialised once (a global's lazy, thread-safe initialiser) and never written again.
        nonisolated(unsafe) private static let funcs: UnsafeMutablePointer<GSourceFuncs> = {
            let funcs = UnsafeMutablePointer<GSourceFuncs>.allocate(capacity: 1)
            funcs.initialize(
                to: GSourceFuncs(
                    prepare: { source, timeout in owner(source).prepare(timeout) },
                    check: { source in owner(source).check(source!) },
                    dispatch: { source, _, _ in owner(source).dispatch() },
                    finalize: { source in
                        let object = owner(source)
                        object.finalized()
                        // safety: the retain taken in init; GLib calls finalize once per source.
                        Unmanaged.passUnretained(object).release()
                    },
                    closure_callback: nil, closure_marshal: nil))
            return funcs
        }()
    }
#endif
