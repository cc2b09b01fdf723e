// DiagnosticsConfiguration: the arguments of TK_DIAGNOSTICS (docs/Diagnostics.md). The feature
// bits themselves are set by C before main (Diagnostics.c); this parses what C ignores: the hang
// threshold (`hangs:250ms`) and names nobody knows, which are warned about once on stderr when the
// configuration is first read. An immutable value; `TKDiagnostics` holds the current one.

/// What TK_DIAGNOSTICS asked for, beyond the feature bits.
struct DiagnosticsConfiguration: Sendable, Equatable {
    /// How long a run-loop pass, work item or operation may run before it is reported.
    var hangThreshold: Duration = DiagnosticsConfiguration.defaultHangThreshold
    /// Items of the variable that are not understood, as written.
    var unknown: [String] = []

    static let defaultHangThreshold: Duration = .milliseconds(250)

    /// TK_DIAGNOSTICS as the process started with it, parsed on first use (which prints the
    /// warning about unknown items, if any, once).
    static let fromEnvironment: DiagnosticsConfiguration = {
        let configuration = DiagnosticsConfiguration(parsing: DiagnosticsSwitch.environment)
        if let warning = configuration.warning { TKDiagnostics.printError(warning) }
        return configuration
    }()

    /// Parses `lockorder,hangs:100ms,contention`: items separated by commas, each a name with an
    /// optional `:argument`.
    init(parsing text: String?) {
        guard let text else { return }
        for item in text.split(separator: ",", omittingEmptySubsequences: true) {
            let parts = item.split(separator: ":", maxSplits: 1).map { $0.trimmingSpaces }
            let name = parts[0].lowercased(), argument = parts.count > 1 ? parts[1] : nil
            switch name {
            case "lockorder":
                if let argument, argument != "fatal" { unknown.append(String(item)) }
            case "hangs":
                if let argument {
                    if let threshold = DiagnosticsConfiguration.duration(argument) { hangThreshold = threshold }
                    else { unknown.append(String(item)) }
                }
            case "contention", "trace", "all", "off", "none":
                if argument != nil && name != "trace" { unknown.append(String(item)) }
            default:
                unknown.append(String(item))
            }
        }
    }

    init() {}

    /// `250ms`, `2s`, `500us`, `1.5s`, `750` (milliseconds); nil when not a positive duration.
    static func duration(_ text: String) -> Duration? {
        let digits = text.prefix { $0.isNumber || $0 == "." }
        let unit = text.dropFirst(digits.count).lowercased()
        guard let value = Double(digits), value > 0 else { return nil }
        let scale: Double
        switch unit {
        case "", "ms": scale = 1e6
        case "s": scale = 1e9
        case "us", "µs": scale = 1e3
        case "ns": scale = 1
        default: return nil
        }
        let nanoseconds = value * scale
        guard nanoseconds >= 1, nanoseconds < 1e18 else { return nil }
        return .nanoseconds(Int64(nanoseconds))
    }

    /// The warning for the unknown items, or nil.
    var warning: String? {
        guard !unknown.isEmpty else { return nil }
        return "ThreadKit diagnostics: TK_DIAGNOSTICS: ignoring \(unknown.map { "\"\($0)\"" }.joined(separator: ", ")) "
            + "(known: lockorder, lockorder:fatal, hangs, hangs:250ms, contention, trace, all, off)"
    }
}

private extension Substring {
    var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
