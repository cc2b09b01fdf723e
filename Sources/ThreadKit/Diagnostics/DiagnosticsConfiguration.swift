// DiagnosticsConfiguration: what TK_DIAGNOSTICS asks for (docs/Diagnostics.md §0), as parsed by
// the one parser of the variable, C's tk_diagnostics_parse (Diagnostics.c): the same function set
// the feature bits before main and, there, printed one line on stderr per item it did not
// understand. Here it gives the hang threshold (`hangs:250ms`) and, for tests and tools, the
// features and the rejected items. An immutable value; `TKDiagnostics` holds the current one.
import CThreadKit

/// What TK_DIAGNOSTICS asked for.
struct DiagnosticsConfiguration: Sendable, Equatable {
    /// The features the items understood enable (without the debug build's default).
    var features: TKDiagnosticsFeature = []
    /// `off` or `none` was given: everything off, the debug default too.
    var off = false
    /// How long a run-loop pass, work item or operation may run before it is reported.
    var hangThreshold: Duration = DiagnosticsConfiguration.defaultHangThreshold
    /// The signal that prints a thread dump (`dump:SIGUSR2`); nil when `dump` was not given.
    var dumpSignal: Int32?
    /// How much the flight recorder keeps (`flight:30s`); nil when `flight` was not given.
    var flightWindow: Duration?
    /// How many items were not understood (each enabled nothing).
    var rejected = 0
    /// One line per rejected item, naming it, why, and the accepted forms; nil when none.
    var warning: String?

    static let defaultHangThreshold: Duration = .milliseconds(250)

    /// TK_DIAGNOSTICS as the process started with it (its rejected items were already named on
    /// stderr by the C constructor that set the switch).
    static let fromEnvironment = DiagnosticsConfiguration(parsing: DiagnosticsSwitch.environment)

    /// Parses `lockorder, Hangs:100ms ,contention`: a pure function of `text`.
    init(parsing text: String?) {
        guard let text else { return }
        var settings = tk_diagnostics_settings()
        var buffer = [CChar](repeating: 0, count: 8192)
        buffer.withUnsafeMutableBufferPointer { tk_diagnostics_parse(text, &settings, $0.baseAddress, $0.count) }
        features = TKDiagnosticsFeature(rawValue: settings.features)
        off = settings.off != 0
        if settings.hang_threshold_ns != 0 { hangThreshold = .nanoseconds(Int64(settings.hang_threshold_ns)) }
        if settings.dump_signal != 0 { dumpSignal = settings.dump_signal }
        if settings.flight_window_ns != 0 { flightWindow = .nanoseconds(Int64(settings.flight_window_ns)) }
        rejected = Int(settings.rejected)
        let lines = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        warning = lines.isEmpty ? nil : String(lines.dropLast()) // without the last newline
    }

    init() {}
}
