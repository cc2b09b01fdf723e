// DiagnosticsSwitch: which diagnostics are on (docs/Diagnostics.md). The word itself is C's
// tk_diagnostics_word (CThreadKitDiagnostics.h), set from TK_DIAGNOSTICS before main runs and by
// TKDiagnostics.enable/disable afterwards. Every hook in the library starts with
// `if DiagnosticsSwitch.isOn(.feature)`: one relaxed load and a branch when diagnostics are off.
// Any thread may read it; writes are rare (configuration) and need no ordering with readers,
// because each feature publishes its own data through its own locks and atomics.

import CThreadKit

/// The diagnostics features, one bit each in the switch word.
// The constants are inlinable computed properties, not `static let`s: a stored static is a lazy
// global, and every hook would call its accessor (a function call and a once-check) before the
// one relaxed load it is meant to cost.
public struct TKDiagnosticsFeature: OptionSet, Sendable, Hashable {
    /// The bits of the set, as in C's `tk_diagnostics_word` (`TK_DIAG_…` constants).
    public let rawValue: UInt32
    /// Creates the set whose bits are `rawValue`.
    @inlinable public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Lock-order (potential deadlock) prediction.
    @inlinable public static var lockOrder: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_LOCK_ORDER)) }
    /// With `lockOrder`: stop the process at the first cycle instead of reporting it.
    @inlinable public static var lockOrderFatal: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_LOCK_ORDER_FATAL)) }
    /// Hang reports from the watchdog thread.
    @inlinable public static var hangs: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_HANGS)) }
    /// Per-lock and per-queue contention counters.
    @inlinable public static var contention: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_CONTENTION)) }
    /// The trace recorder.
    @inlinable public static var trace: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_TRACE)) }
    /// Reports of blocking waits made where they starve something: in a Swift concurrency job, on
    /// the main thread while its loop runs, on a loop thread an actor is pinned to.
    @inlinable public static var blocking: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_BLOCKING)) }
    /// With `blocking`: stop the process at the first such wait instead of reporting it.
    @inlinable public static var blockingFatal: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_BLOCKING_FATAL)) }
    /// Who waits for whom: each ThreadKit wait records what it waits for and its holder, for
    /// thread dumps and deadlock cycles.
    @inlinable public static var waits: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_WAITS)) }
    /// A thread dump on standard error when the process receives the chosen signal.
    @inlinable public static var dumpOnSignal: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_DUMP)) }
    /// The trace kept as a flight recorder: the last seconds, in bounded memory.
    @inlinable public static var flightRecorder: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_FLIGHT)) }
    /// Sampled latency, run-time and depth metrics, exported by the ThreadKitMetrics product.
    @inlinable public static var metrics: TKDiagnosticsFeature { TKDiagnosticsFeature(rawValue: UInt32(TK_DIAG_METRICS)) }
}

@usableFromInline
enum DiagnosticsSwitch {
    /// True when any feature in `feature` is on. Inlined into every hook.
    @inlinable @inline(__always)
    static func isOn(_ feature: TKDiagnosticsFeature) -> Bool {
        tk_diagnostics_load() & feature.rawValue != 0
    }

    /// The features on now.
    static var current: TKDiagnosticsFeature {
        TKDiagnosticsFeature(rawValue: tk_diagnostics_load())
    }

    /// Changes the switch word atomically (a compare-and-swap loop, so TKDiagnostics and TKTrace,
    /// each with its own lock, never lose each other's bits); returns it before and after.
    @discardableResult
    static func update(_ transform: (TKDiagnosticsFeature) -> TKDiagnosticsFeature)
        -> (before: TKDiagnosticsFeature, after: TKDiagnosticsFeature)
    {
        while true {
            let before = current
            let after = transform(before)
            if tk_diagnostics_compare_exchange(before.rawValue, after.rawValue) { return (before, after) }
        }
    }

    /// TK_DIAGNOSTICS as the process started with it, for parsing feature arguments.
    static var environment: String? {
        guard let value = tk_diagnostics_environment() else { return nil }
        return String(cString: value)
    }
}
