// TKContentionCounters: one row of the contention counters (docs/Diagnostics.md §3). A value;
// Contention builds and updates rows under its mutex and hands out copies.

/// Contention counters of one named lock or one queue (docs/Diagnostics.md §3), counted while
/// `TKDiagnosticsFeature.contention` is on. Unnamed locks of one kind share a row.
public struct TKContentionCounters: Sendable, CustomStringConvertible {
    /// `TKLock "cache"`, `TKLock (unnamed)`, `queue "com.app.io"`.
    public let name: String
    /// Acquisitions that could not take the lock at once (for a queue: `sync` calls that waited).
    public internal(set) var waits = 0
    /// Time spent in those waits, all together.
    public internal(set) var totalWait: Duration = .zero
    /// The longest of those waits.
    public internal(set) var maxWait: Duration = .zero
    /// Where the longest wait was made: its call stack, captured as it ended.
    var maxWaitStack: CallStack?
    /// The call site of the longest wait: the caller's frame that called into ThreadKit
    /// (docs/Diagnostics.md §7); nil when no wait was counted.
    public var maxWaitCallSite: String? {
        guard let frames = maxWaitStack?.frames, !frames.isEmpty else { return nil }
        return frames[CallStack.callSite(in: frames) ?? 0].text
    }
    /// Queue items whose enqueue-to-start latency was measured.
    public internal(set) var starts = 0
    /// Enqueue-to-start latency of those items, all together.
    public internal(set) var totalLatency: Duration = .zero
    /// The longest enqueue-to-start latency of those items.
    public internal(set) var maxLatency: Duration = .zero

    init(name: String) { self.name = name }

    mutating func addWait(_ nanoseconds: UInt64) {
        let d = Duration.nanoseconds(Int64(clamping: nanoseconds))
        waits += 1
        totalWait += d
        maxWait = max(maxWait, d)
    }

    mutating func addLatency(_ nanoseconds: UInt64) {
        let d = Duration.nanoseconds(Int64(clamping: nanoseconds))
        starts += 1
        totalLatency += d
        maxLatency = max(maxLatency, d)
    }

    /// One line: the name, then waits (count, total, max and where the longest was made) and
    /// latency (items, total, max) when any.
    public var description: String {
        var parts: [String] = []
        if waits > 0 {
            let site = maxWaitCallSite.map { " at \($0)" } ?? ""
            parts.append("waits \(waits), total \(Self.format(totalWait)), max \(Self.format(maxWait))\(site)")
        }
        if starts > 0 {
            let mean = totalLatency / starts
            parts.append("started \(starts), latency mean \(Self.format(mean)), max \(Self.format(maxLatency))")
        }
        return "\(name): " + (parts.isEmpty ? "no waits" : parts.joined(separator: "; "))
    }

    static func format(_ d: Duration) -> String {
        let ns = d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
        if ns >= 1_000_000_000 { return "\(ns / 1_000_000_000).\(ns / 100_000_000 % 10) s" }
        if ns >= 1_000_000 { return "\(ns / 1_000_000).\(ns / 100_000 % 10) ms" }
        if ns >= 1_000 { return "\(ns / 1_000).\(ns / 100 % 10) µs" }
        return "\(ns) ns"
    }
}
