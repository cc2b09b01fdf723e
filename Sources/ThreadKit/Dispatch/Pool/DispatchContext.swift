// DispatchContext: per thread, the stack of queues the thread is running inside right now, for
// deadlock detection in `sync` and for the static `getSpecific`. Read and written only by its own
// thread. A pool worker keeps its context in the worker object; other threads get one on first
// use of `sync` or `getSpecific` (a TKThreadLocal).

final class DispatchContext {
    /// One queue the thread is inside. `exclusive`: a serial queue, or a concurrent queue running
    /// a barrier: nothing else of it can run until the thread leaves. The queue is unowned: a frame
    /// lives only while the queue runs one of its entries, and the entry's job retains the queue.
    struct Frame {
        unowned(unsafe) let queue: TKDispatchQueue
        let exclusive: Bool
    }

    private(set) var frames: [Frame] = []

    init() { frames.reserveCapacity(8) }

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

    @inline(__always) func push(_ queue: TKDispatchQueue, exclusive: Bool) {
        frames.append(Frame(queue: queue, exclusive: exclusive))
    }

    @inline(__always) func pop() { frames.removeLast() }

    /// The queue whose entry the thread is running (innermost), nil outside any queue.
    var innermost: TKDispatchQueue? { frames.last?.queue }

    /// The frame for `queue` if the thread is inside it (innermost first).
    func frame(for queue: TKDispatchQueue) -> Frame? {
        for frame in frames.reversed() where frame.queue === queue { return frame }
        return nil
    }
}
