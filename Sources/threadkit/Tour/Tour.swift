// Tour: the registry and runner of the narrated scenarios. Each scenario prints what happens as
// it happens and ends with one verdict line; the tour exits non-zero if any verdict fails.
// Scenarios run one after another on the main thread (they start their own threads).
// `threadkit tour --child ROLE ...` (hidden) is a scenario's child process (TourChildren.swift).
// The tour links ThreadKit only: a scenario that needs another library is an `Elsewhere` entry,
// listed and announced in its place with the command that runs it (the PostgreSQL lock:
// `swift run --traits Postgres threadkit-postgres tour`, Sources/threadkit-postgres).
import ChildProcessRoles
import ThreadKit

// Scenario, Narrator, ScenarioFailure and the one-scenario runner: Sources/ChildProcessRoles/TourRunner.swift.

/// A scenario of the seeds that another executable runs, because it links more than ThreadKit.
struct Elsewhere: Sendable {
    let name: String
    let title: String
    /// The command that runs it.
    let command: String

    var line: String { "run with `\(command)` (\(title); its own executable, so that this tour builds ThreadKit only)" }
}

enum Tour {
    /// One place in the tour: a scenario it runs, or one that runs elsewhere.
    enum Entry: Sendable {
        case scenario(Scenario)
        case elsewhere(Elsewhere)

        var name: String {
            switch self {
            case .scenario(let s): return s.name
            case .elsewhere(let e): return e.name
            }
        }
    }

    /// The PostgreSQL lock (SPEC §9): Sources/threadkit-postgres/PostgresLockScenario.swift.
    static let postgresLock = Elsewhere(
        name: "distributed-lock-postgres", title: "a lock on PostgreSQL: crash-safe, with fencing tokens",
        command: "swift run --traits Postgres threadkit-postgres tour")

    /// Metrics on a Prometheus page (docs/Metrics.md): Sources/threadkit-metrics/MetricsScenario.swift.
    static let metrics = Elsewhere(
        name: "metrics-prometheus", title: "latency, run time, depth and contention on a Prometheus page",
        command: "swift run threadkit-metrics tour")

    /// GLib's main loop running ThreadKit's (docs/GLib.md): Sources/threadkit-glib/GLibScenario.swift.
    static let glibMainLoop = Elsewhere(
        name: "glib-main-loop", title: "g_main_loop_run serves ThreadKit, Dispatch's main queue and the main actor",
        command: "swift run --traits GLib threadkit-glib tour")

    /// Every entry, in the order the tour runs them (the order of the seeds' chapters).
    static let entries: [Entry] =
        (ThreadScenarios.all + RunLoopScenarios.all + PerformScenarios.all + PortScenarios.all + NetworkScenarios.all
        + NotificationQueueScenarios.all + LockScenarios.all + [DistributedLockScenario.scenario] + DispatchScenarios.all
        + OperationScenarios.all + ConcurrencyScenarios.all).map(Entry.scenario) + [.elsewhere(glibMainLoop), .elsewhere(postgresLock)]
        + ([TraceScenario.scenario] + DiagnosticsScenarios.all).map(Entry.scenario) + [.elsewhere(metrics)]

    /// Every scenario this executable runs (`threadkit trace` records any of them).
    static let scenarios: [Scenario] = entries.compactMap { if case .scenario(let s) = $0 { s } else { nil } }

    static func main(_ arguments: [String]) -> Int32 {
        if arguments.first == "--child" { return TourChildren.main(Array(arguments.dropFirst())) }
        if arguments.contains("--list") {
            for entry in entries {
                switch entry {
                case .scenario(let s): Console.out("\(Console.padded(s.name, 24)) \(s.title)")
                case .elsewhere(let e): Console.out("\(Console.padded(e.name, 24)) \(e.title): run with `\(e.command)`")
                }
            }
            return 0
        }
        // --counters: count contention while the scenarios run and print the counters after them.
        let counters = arguments.contains("--counters")
        let arguments = arguments.filter { $0 != "--counters" }
        if counters {
            TKDiagnostics.resetContentionCounters()
            TKDiagnostics.enable(.contention)
        }
        var selectedEntries = entries
        if !arguments.isEmpty {
            let unknown = arguments.filter { name in !entries.contains { $0.name == name } }
            if !unknown.isEmpty {
                Console.err("threadkit tour: no scenario named \(unknown.joined(separator: ", ")). See `threadkit tour --list`.")
                return 2
            }
            selectedEntries = arguments.compactMap { name in entries.first { $0.name == name } }
        }
        var selected: [Scenario] = []
        var failed: [String] = []
        for entry in selectedEntries {
            let scenario: Scenario
            switch entry {
            case .scenario(let s): scenario = s
            case .elsewhere(let e):
                Console.out("▶ \(e.name): \(e.line)\n")
                continue
            }
            let index = selected.count
            selected.append(scenario)
            if !TourRunner.run(scenario, runsFirst: index == 0) { failed.append(scenario.name) }
        }
        if counters { Console.out(TKDiagnostics.summary + "\n") }
        Console.out(
            "tour: \(selected.count - failed.count) of \(selected.count) scenarios passed"
                + (failed.isEmpty ? "" : "; failed: \(failed.joined(separator: ", "))"))
        return failed.isEmpty ? 0 : 1
    }
}
