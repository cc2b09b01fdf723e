// TourSupport: what the metrics scenario needs of the `threadkit` tour's runner, trimmed to one
// scenario: the scenario and narrator types and the verdict's failure (Sources/threadkit's
// Tour.swift holds the full versions; this executable must not link the tour, nor the tour
// swift-metrics). Console comes from Sources/ChildProcessRoles. Main thread only.
import ChildProcessRoles

struct Scenario: Sendable {
    let name: String
    let title: String
    /// The document passage it shows.
    let source: String
    /// Runs the scenario, narrating through `Narrator`; returns the verdict's detail on success
    /// and throws `ScenarioFailure` on failure.
    let run: @Sendable (Narrator) throws -> String
}

struct ScenarioFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Prints narration lines, indented under the scenario's heading.
final class Narrator: Sendable {
    func say(_ line: String) { Console.out("  \(line)") }

    func check(_ condition: Bool, _ failure: @autoclosure () -> String) throws {
        if !condition { throw ScenarioFailure(failure()) }
    }
}
