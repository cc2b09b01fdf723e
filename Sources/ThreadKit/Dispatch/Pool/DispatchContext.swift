// DispatchContext: per thread, the stack of queues the thread is running inside right now, for
// deadlock detection in `sync` and for the static `getSpecific`. Read and written only by its own
// thread. A pool worker keeps its context in the worker object; other threads get one on first
// use of `sync` or `getSpecific` (a TKThreadLocal).

final class DispatchContext {
    /// One queue the thread is inside. `exclusive`: a serial queue, or a concurrent queue running
    /// a barrier: nothing else of it can run until the thread leaves. The queue is unowned: a frame
    /// lives only while the queue runs one of its entries, and the entry's job retains the queue.
    struct Frame {
        // safety: a frame is pushed when the queue starts running an entry and popped before the
        // entry's job (which retains the queue) is released, so the queue outlives the frame.
        unowned(unsafe) let queue: TKDispatchQueue
        let exclusive: Bool
    }

    /// The stack, in memory of its own: an array stored in a class pays a runtime exclusivity
    /// check and a uniqueness check on every push and pop (two of each per job a worker runs:
    /// ~250 instructions, callgrind); a `let` pointer pays none. Frames are trivial values (an
    /// unowned(unsafe) reference and a flag).
    private struct Stack {
        // safety: `capacity` frames, owned by the context (grown in `grow`, freed in deinit);
        // only the context's own thread touches it.
        var base: UnsafeMutablePointer<Frame>
        var capacity: Int
        var count: Int
    }
    // safety: allocated in init and freed in deinit (with `base`); read and written only by the
    // context's own thread, so accesses never overlap.
    private let stack: UnsafeMutablePointer<Stack>

    init() {
        // safety: both freed in deinit.
        stack = .allocate(capacity: 1)
        stack.initialize(to: Stack(base: .allocate(capacity: 8), capacity: 8, count: 0))
    }

    deinit {
        stack.pointee.base.deallocate()
        stack.deallocate()
    }

    private static let slot = TKThreadLocal<DispatchContext>()

    /// The calling thread's context, made on first use.
    static var current: DispatchContext {
        if let context = slot.value { return context }
        let context = DispatchContext()
        slot.value = context
        return context
    }

    /// The calling thread's context if it has one (never makes one).
    static var existing: DispatchContext? { slot.value }

    /// Called once by a pool worker on its own thread, with the context it keeps.
    static func install(_ context: DispatchContext) { slot.value = context }

    /// The frames, outermost first. Valid until the next push or pop.
    // safety: the caller is the context's thread, which alone pushes and pops, and uses the
    // buffer before its next push or pop (`frame(for:)`).
    var frames: UnsafeBufferPointer<Frame> { UnsafeBufferPointer(start: stack.pointee.base, count: stack.pointee.count) }

    @inline(__always) func push(_ queue: TKDispatchQueue, exclusive: Bool) {
        if stack.pointee.count == stack.pointee.capacity { grow() }
        // safety: count < capacity after the grow check; frames are trivial, so the slot needs
        // no deinitialization when popped.
        (stack.pointee.base + stack.pointee.count).initialize(to: Frame(queue: queue, exclusive: exclusive))
        stack.pointee.count += 1
    }

    @inline(__always) func pop() { stack.pointee.count -= 1 }

    /// The queue whose entry the thread is running (innermost), nil outside any queue.
    var innermost: TKDispatchQueue? { stack.pointee.count > 0 ? stack.pointee.base[stack.pointee.count - 1].queue : nil }

    /// The frame for `queue` if the thread is inside it (innermost first).
    func frame(for queue: TKDispatchQueue) -> Frame? {
        for frame in frames.reversed() where frame.queue === queue { return frame }
        return nil
    }

    private func grow() {
        let n = stack.pointee.capacity
        // safety: the frames move to the new buffer before the old one is freed; only this
        // thread holds either.
        let bigger = UnsafeMutablePointer<Frame>.allocate(capacity: 2 * n)
        bigger.moveInitialize(from: stack.pointee.base, count: n)
        stack.pointee.base.deallocate()
        stack.pointee.base = bigger
        stack.pointee.capacity = 2 * n
    }
}
