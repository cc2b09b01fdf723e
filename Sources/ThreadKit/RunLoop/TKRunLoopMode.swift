// TKRunLoop.Mode and RunResult: the names of run-loop modes and the outcome of one run.
// Immutable values.

extension TKRunLoop {
    /// A run-loop mode: a named set of sources, timers, ports and observers. `.common` is a
    /// pseudo-mode standing for every mode in the loop's common-mode set.
    public struct Mode: Hashable, Sendable, RawRepresentable, ExpressibleByStringLiteral, CustomStringConvertible {
        /// The mode's name: modes with equal names are the same mode. The predefined modes carry
        /// Apple's names (`kCFRunLoopDefaultMode`, `kCFRunLoopCommonModes`, …).
        public let rawValue: String
        /// The mode named `rawValue`, e.g. `TKRunLoop.Mode("com.example.dragging")`. Nothing
        /// registers it: as in CFRunLoop, a loop's mode comes into being when something is added
        /// to it.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// The mode named `rawValue` (RawRepresentable); the same as `init(_:)`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The mode named by a string literal: `let dragging: TKRunLoop.Mode = "dragging"`.
        public init(stringLiteral value: String) { rawValue = value }
        /// The mode's name, `rawValue`.
        public var description: String { rawValue }

        /// The mode for most work, and the one `run()` and `run(until:)` run
        /// (kCFRunLoopDefaultMode, NSRunLoop.Mode.default). In every loop's common-mode set.
        public static let `default`: Mode = "kCFRunLoopDefaultMode"
        /// The pseudo-mode standing for the loop's common-mode set (kCFRunLoopCommonModes,
        /// NSRunLoop.Mode.common): what is added to it joins every mode of the set, including
        /// modes added later with `addCommonMode(_:)`; removing from it removes from each. It
        /// cannot be run: `run(mode: .common, …)` stops the process with a message.
        public static let common: Mode = "kCFRunLoopCommonModes"
        /// The mode a loop runs while tracking a control (NSRunLoop.Mode.eventTracking; named as
        /// UIKit's UITrackingRunLoopMode). In the main loop's common-mode set only.
        public static let eventTracking: Mode = "UITrackingRunLoopMode"
        /// The mode a loop runs while a modal panel is up (NSRunLoop.Mode.modalPanel, named
        /// NSModalPanelRunLoopMode). In the main loop's common-mode set only.
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
///
/// Version-0 sources are kept by identity with the sequence number of their insertion into this
/// mode, and the signalled ones on a ready list (docs/RunLoopIteration.md, "Ready sources"), so a
/// pass visits what was signalled, not everything the mode holds: its cost follows what is
/// ready, not how many sources exist. Performing in (`order`, insertion) order is what the sorted
/// array this replaces gave.
final class ModeItems {
    struct SourceEntry {
        let source: TKRunLoopSource
        /// Insertion sequence in this mode: ties of `order` perform in insertion order.
        let sequence: UInt64
    }
    /// Version-0 sources of this mode, by identity.
    private(set) var sources: [ObjectIdentifier: SourceEntry] = [:]
    private var nextSequence: UInt64 = 0
    /// Sources signalled since this mode's last pass took them, each at most once (`readyIDs`).
    /// An entry may be stale (its signal consumed by a pass in another mode or loop): the pass
    /// skips it. Always a subset of `sources` (removal drops the entry).
    private var ready: [TKRunLoopSource] = []
    private var readyIDs: Set<ObjectIdentifier> = []
    /// Observers, kept sorted by `order`.
    var observers: [TKRunLoopObserver] = []
    /// The timers of this mode (membership) and their deadlines (a heap with lazy deletion).
    var timers: Set<ObjectIdentifier> = []
    var timerHeap = TimerHeap()
    var ports: [TKPort] = []

    /// A mode with nothing that could wake the loop: observers do not count (CFRunLoop's rule).
    var isEmpty: Bool { sources.isEmpty && timers.isEmpty && ports.isEmpty }

    /// Whether sources were signalled since this mode's last pass took them (entries may be stale:
    /// a hint that a pass is worth running, for a host loop; TKRunLoop+Embedding).
    var hasReady: Bool { !ready.isEmpty }

    /// Adds a version-0 source; false if it was in this mode already.
    func insertSource(_ source: TKRunLoopSource) -> Bool {
        let id = ObjectIdentifier(source)
        guard sources[id] == nil else { return false }
        sources[id] = SourceEntry(source: source, sequence: nextSequence)
        nextSequence &+= 1
        return true
    }

    /// Removes a version-0 source (and its ready entry); false if it was not in this mode.
    func removeSource(_ source: TKRunLoopSource) -> Bool {
        let id = ObjectIdentifier(source)
        guard sources.removeValue(forKey: id) != nil else { return false }
        if readyIDs.remove(id) != nil, let index = ready.firstIndex(where: { $0 === source }) { ready.remove(at: index) }
        return true
    }

    /// The sources in the order a pass performs them: `order`, then insertion.
    var sourcesInOrder: [TKRunLoopSource] { Self.inOrder(sources.values) }

    /// Puts a signalled source of this mode on the ready list (once; a source not in this mode is
    /// ignored).
    func markReady(_ source: TKRunLoopSource) {
        let id = ObjectIdentifier(source)
        guard sources[id] != nil, readyIDs.insert(id).inserted else { return }
        ready.append(source)
    }

    /// Takes the ready list, in the order a pass performs it; the list is empty afterwards.
    func takeReady() -> [TKRunLoopSource] {
        guard !ready.isEmpty else { return [] }
        let taken = ready.compactMap { sources[ObjectIdentifier($0)] }
        ready.removeAll(keepingCapacity: true)
        readyIDs.removeAll(keepingCapacity: true)
        return Self.inOrder(taken)
    }

    private static func inOrder(_ entries: some Sequence<SourceEntry>) -> [TKRunLoopSource] {
        entries.sorted { ($0.source.order, $0.sequence) < ($1.source.order, $1.sequence) }.map(\.source)
    }

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
