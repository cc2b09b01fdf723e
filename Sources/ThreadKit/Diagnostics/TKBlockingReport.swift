// TKBlockingReport: what the blocking checker reports about one call site that blocked a thread
// which must not block (docs/Diagnostics.md §5). An immutable value; any thread.

/// A blocking wait made where it starves something: inside a Swift concurrency job, on the main
/// thread while its run loop runs, or on a loop thread an actor is pinned to. Reported once per
/// call site (the first frames of the caller's own code above ThreadKit's).
public struct TKBlockingReport: Sendable, CustomStringConvertible {
    /// Where the blocking wait was made, and so what it starves.
    public enum Place: Sendable, Hashable {
        /// Inside a Swift concurrency job: a task on Swift's cooperative pool or on a ThreadKit
        /// executor (the pool as task or global executor, a dispatch queue as an actor's executor).
        case swiftConcurrencyJob
        /// On the main thread while `TKRunLoop.main` runs there: the loop's timers, sources,
        /// perform blocks and main-queue work wait.
        case mainRunLoop
        /// On the thread of a `TKRunLoop` that serves as an actor's `SerialExecutor`: the actor's
        /// other jobs and the loop's other work wait.
        case actorRunLoop
    }

    /// Where the wait was made.
    public let place: Place
    /// What the wait starves, e.g. `a Swift concurrency job on the cooperative pool (2 threads)`,
    /// `the main thread's run loop (TKRunLoop.main)`, `the loop thread of actor executor TKRunLoop
    /// of thread 4711 ("decoder")`.
    public let starves: String
    /// How the blocking was seen: `a ThreadKit wait that parked in the kernel`, or `the dispatch
    /// pool's monitor (the worker was blocked outside ThreadKit)`.
    public let noticedBy: String
    /// `thread TID "name"`.
    public let thread: String
    /// The kernel thread id of the thread that blocked.
    public let threadID: UInt32
    /// The stack from the wait's innermost frame (or the outside call that blocked) outwards.
    let stack: CallStack

    init(place: Place, starves: String, noticedBy: String, thread: LockOrderThread, stack: CallStack) {
        self.place = place
        self.starves = starves
        self.noticedBy = noticedBy
        self.thread = thread.description
        self.threadID = thread.tid
        self.stack = stack
    }

    /// The call site: the first frame of the caller's code above ThreadKit's own frames and the
    /// system's, symbolized (`function + 0xoffset at File.swift:LINE (image)`; `image +0xoffset`
    /// for a stripped binary; docs/Diagnostics.md §7).
    public var callSite: String {
        let frames = stack.frames
        guard !frames.isEmpty else { return "an unknown call site (no frames)" }
        return frames[CallStack.callSite(in: frames) ?? 0].text
    }

    /// The call stack: the call site first (with the ThreadKit call that waited), then the frames
    /// above it, ThreadKit's own folded (`TKDiagnostics.foldsThreadKitFrames`).
    public var callStack: [String] { stack.lines }

    /// The report as printed: the thread, what it starves, the call site, the stack and the fix.
    public var description: String {
        var text = "ThreadKit blocking: \(thread) blocked (\(noticedBy)) at \(callSite), starving \(starves). Stack:\n"
        for frame in callStack { text += "      \(frame)\n" }
        return text + "  Fix: " + fix
    }

    /// What to do instead, for this place.
    var fix: String {
        switch place {
        case .swiftConcurrencyJob:
            "do not block inside a Swift concurrency job: await instead (an async API, a continuation resumed "
                + "by the other side, Task.sleep), or run the blocking work on a thread of its own (TKThread) or a "
                + "dispatch queue and await its result."
        case .mainRunLoop:
            "do not block the main thread while its run loop runs: do the waiting work on another thread or queue "
                + "and come back to the main loop with perform(_:) or TKDispatchQueue.main.async."
        case .actorRunLoop:
            "do not block the loop thread an actor runs on: await instead inside the actor, or do the waiting work "
                + "on another thread and hand the result back to the loop with perform(_:)."
        }
    }
}
