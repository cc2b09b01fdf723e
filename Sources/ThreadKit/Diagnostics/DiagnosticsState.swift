// DiagnosticsState: the mutable state behind TKDiagnostics (docs/Diagnostics.md §0): report
// handlers, whether reports are printed, the stored hang reports, and the read-modify-write of
// the switch word. Everything is guarded by `mutex` (a leaf: handlers run after it is released).

// safety: the state is read and written only under `mutex` (immutable after init).
/// The mutable state behind TKDiagnostics, guarded by `mutex` (a leaf: handlers run outside it).
final class DiagnosticsState: @unchecked Sendable {
    static let shared = DiagnosticsState()

    struct State {
        var prints = true
        var lockOrderHandler: (@Sendable (TKLockOrderReport) -> Void)?
        var hangHandler: (@Sendable (TKHangReport) -> Void)?
        var hangs: [TKHangReport] = []
    }

    private let mutex = RawMutex()
    private var state = State() // guarded by mutex

    func read<T>(_ body: (State) -> T) -> T { mutex.withLock { body(state) } }
    func update<T>(_ body: (inout State) -> T) -> T { mutex.withLock { body(&state) } }

    /// Changes the switch word; returns it before and after.
    func change(_ transform: (TKDiagnosticsFeature) -> TKDiagnosticsFeature) -> (TKDiagnosticsFeature, TKDiagnosticsFeature) {
        mutex.withLock { DiagnosticsSwitch.update(transform) }
    }
}
