// TKRunLoop.Mode and RunResult: the names of run-loop modes and the outcome of one run.
// Immutable values.

extension TKRunLoop {
    /// A run-loop mode: a named set of sources, timers, ports and observers. `.common` is a
    /// pseudo-mode standing for every mode in the loop's common-mode set.
    public struct Mode: Hashable, Sendable, RawRepresentable, ExpressibleByStringLiteral, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { rawValue = value }
        public var description: String { rawValue }

        public static let `default`: Mode = "kCFRunLoopDefaultMode"
        public static let common: Mode = "kCFRunLoopCommonModes"
        public static let eventTracking: Mode = "UITrackingRunLoopMode"
        public static let modalPanel: Mode = "NSModalPanelRunLoopMode"
    }

    /// Why `run(mode:for:returnAfterSourceHandled:)` returned (CFRunLoopRunResult).
    public enum RunResult: Sendable {
        /// The mode has no sources, timers or ports (nothing could ever wake it).
        case finished
        /// `stop()` was called.
        case stopped
        /// The time limit passed.
        case timedOut
        /// A source was handled and the run was asked to return after one.
        case handledSource
    }
}

/// What one mode of one loop holds. Guarded by the loop's `lock`.
final class ModeItems {
    /// Version-0 sources, kept sorted by `order` (stable for equal orders).
    var sources: [TKRunLoopSource] = []
    /// Observers, kept sorted by `order`.
    var observers: [TKRunLoopObserver] = []
    /// The timers of this mode (membership) and their deadlines (a heap with lazy deletion).
    var timers: Set<ObjectIdentifier> = []
    var timerHeap = TimerHeap()
    var ports: [TKPort] = []

    /// A mode with nothing that could wake the loop: observers do not count (CFRunLoop's rule).
    var isEmpty: Bool { sources.isEmpty && timers.isEmpty && ports.isEmpty }

    static func insertSorted<T: AnyObject>(_ item: T, into list: inout [T], order: (T) -> Int) -> Bool {
        if list.contains(where: { $0 === item }) { return false }
        let index = list.firstIndex { order($0) > order(item) } ?? list.endIndex
        list.insert(item, at: index)
        return true
    }

    static func remove<T: AnyObject>(_ item: T, from list: inout [T]) -> Bool {
        guard let index = list.firstIndex(where: { $0 === item }) else { return false }
        list.remove(at: index)
        return true
    }
}
