// Tour: the registry and runner of the narrated scenarios. Each scenario prints what happens as
// it happens and ends with one verdict line; the tour exits non-zero if any verdict fails.
// Scenarios run one after another on the main thread (they start their own threads).
import ThreadKit

struct Scenario: Sendable {
    let name: String
    let title: String
    /// The seed document passage it reproduces.
    let source: String
    /// Runs the scenario, narrating through `Narrator`; returns the verdict's detail on success
    /// and throws `ScenarioFailure` on failure.
    let run: @Sendable (Narrator) throws -> String
}

struct ScenarioFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Prints narration lines, indented under the scenario's heading, flushed at once so that lines
/// from several threads appear in the order they were written.
final class Narrator: @unchecked Sendable {
    let scenario: String
    /// Whether no other scenario ran before this one in this process (so no thread was started yet).
    let runsFirst: Bool

    init(scenario: String, runsFirst: Bool = false) {
        self.scenario = scenario
        self.runsFirst = runsFirst
    }

    func say(_ line: String) {
        Console.out("  \(line)")
    }

    func check(_ condition: Bool, _ failure: @autoclosure () -> String) throws {
        if !condition { throw ScenarioFailure(failure()) }
    }
}

enum Tour {
    /// Every scenario, in the order the tour runs them (the order of the seeds' chapters).
    static let scenarios: [Scenario] = ThreadScenarios.all + RunLoopScenarios.all + PerformScenarios.all + PortScenarios.all + NetworkScenarios.all
        + NotificationQueueScenarios.all + LockScenarios.all + [DistributedLockScenario.scenario] + DispatchScenarios.all
        + OperationScenarios.all + ConcurrencyScenarios.all + [PostgresLockScenario.scenario]
        + [TraceScenario.scenario]
        + DiagnosticsScenarios.all

    static func main(_ arguments: [String]) -> Int32 {
        if arguments.contains("--list") {
            for s in scenarios { Console.out("\(Console.padded(s.name, 24)) \(s.title)") }
            return 0
        }
        // --counters: count contention while the scenarios run and print the counters after them.
        let counters = arguments.contains("--counters")
        let arguments = arguments.filter { $0 != "--counters" }
        if counters {
            TKDiagnostics.resetContentionCounters()
            TKDiagnostics.enable(.contention)
        }
        var selected = scenarios
        if !arguments.isEmpty {
            let unknown = arguments.filter { name in !scenarios.contains { $0.name == name } }
            if !unknown.isEmpty {
                Console.err("threadkit tour: no scenario named \(unknown.joined(separator: ", ")). See `threadkit tour --list`.")
                return 2
            }
            selected = arguments.compactMap { name in scenarios.first { $0.name == name } }
        }
        var failed: [String] = []
        for (index, scenario) in selected.enumerated() {
            Console.out("▶ \(scenario.name): \(scenario.title)")
            Console.out("  (\(scenario.source))")
            do {
                let detail = try scenario.run(Narrator(scenario: scenario.name, runsFirst: index == 0))
                Console.out("  ✔ verdict: PASS — \(detail)\n")
            } catch {
                Console.out("  ✘ verdict: FAIL — \(error)\n")
                failed.append(scenario.name)
            }
        }
        if counters { Console.out(TKDiagnostics.summary + "\n") }
        Console.out("tour: \(selected.count - failed.count) of \(selected.count) scenarios passed"
              + (failed.isEmpty ? "" : "; failed: \(failed.joined(separator: ", "))"))
        return failed.isEmpty ? 0 : 1
    }
}
