// TKLockOrderReport: what the lock-order checker reports about one cycle (docs/Diagnostics.md §1).
// An immutable value; any thread.

/// A potential deadlock: a cycle in the order in which threads took locks. Each edge says that a
/// thread acquired `acquired` while holding `held`; followed round, the edges come back to the
/// start, so threads repeating those acquisitions at the same time could each wait for the next.
/// The first edge is the acquisition that closed the cycle (happening as the report is made).
public struct TKLockOrderReport: Sendable, CustomStringConvertible {
    /// One "held → acquired" order, where it was first seen.
    public struct Edge: Sendable {
        /// The lock that was held, as `TKLock "name"` (or `TKLock #id` when unnamed).
        public let held: String
        /// The lock that was acquired while `held` was held.
        public let acquired: String
        /// The thread that first took them in this order: `thread TID "name"`.
        public let thread: String
        let stack: CallStack

        init(held: String, acquired: String, thread: String, stack: CallStack) {
            self.held = held
            self.acquired = acquired
            self.thread = thread
            self.stack = stack
        }

        /// The call stack of the acquisition, symbolized on demand: the call site first, ThreadKit's own
        /// frames folded (`TKDiagnostics.foldsThreadKitFrames`; docs/Diagnostics.md §7).
        public var callStack: [String] { stack.lines }
    }

    /// The locks of the cycle, in order: each is held while the next is acquired, and the last is
    /// held while the first is acquired.
    public let locks: [String]
    /// The edges of the cycle, the closing acquisition first.
    public let edges: [Edge]

    /// The report as printed: the cycle, then each edge with its thread and call stack.
    public var description: String {
        var text = "ThreadKit lock order: potential deadlock: \(locks.joined(separator: " -> ")) -> \(locks.first ?? "")\n"
        for (index, edge) in edges.enumerated() {
            let when = index == 0 ? "now" : "earlier"
            text += "  \(edge.acquired) acquired while holding \(edge.held) (\(when), \(edge.thread)) at:\n"
            for frame in edge.callStack { text += "      \(frame)\n" }
        }
        text += "  Fix: take these locks in one global order everywhere (or drop one before taking the next)."
        return text
    }
}
