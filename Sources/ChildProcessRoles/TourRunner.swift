// TourRunner: the tour's scenario, narrator and verdict types, and the runner of a tour of one
// scenario, shared by `threadkit` (the whole tour, Sources/threadkit/Tour/Tour.swift) and the
// executables that run one scenario each because it links more than ThreadKit (threadkit-postgres,
// threadkit-glib, threadkit-metrics). Main thread only, but for `Narrator.say`, which any thread
// may call (Console writes each line whole).
import Glibc

/// One narrated scenario: it prints what happens as it happens and ends with one verdict.
package struct Scenario: Sendable {
    package let name: String
    package let title: String
    /// The seed document passage it reproduces.
    package let source: String
    /// Runs the scenario, narrating through `Narrator`; returns the verdict's detail on success
    /// and throws `ScenarioFailure` on failure.
    package let run: @Sendable (Narrator) throws -> String

    package init(name: String, title: String, source: String, run: @escaping @Sendable (Narrator) throws -> String) {
        self.name = name
        self.title = title
        self.source = source
        self.run = run
    }
}

/// A failed verdict, with what went wrong.
package struct ScenarioFailure: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Prints narration lines, indented under the scenario's heading, flushed at once so that lines
/// from several threads appear in the order they were written.
package final class Narrator: Sendable {
    package let scenario: String
    /// Whether no other scenario ran before this one in this process (so no thread was started yet).
    package let runsFirst: Bool

    package init(scenario: String, runsFirst: Bool = false) {
        self.scenario = scenario
        self.runsFirst = runsFirst
    }

    package func say(_ line: String) {
        Console.out("  \(line)")
    }

    package func check(_ condition: Bool, _ failure: @autoclosure () -> String) throws {
        if !condition { throw ScenarioFailure(failure()) }
    }
}

package enum TourRunner {
    /// This executable's name, as the user typed it (argv[0]'s last component).
    package static var executableName: String {
        String(CommandLine.arguments.first?.split(separator: "/").last ?? "threadkit")
    }

    /// Runs one scenario: its heading, its narration and its verdict; returns the exit status
    /// (0 when it passed).
    package static func run(_ scenario: Scenario, runsFirst: Bool = false) -> Bool {
        Console.out("▶ \(scenario.name): \(scenario.title)")
        Console.out("  (\(scenario.source))")
        do {
            let detail = try scenario.run(Narrator(scenario: scenario.name, runsFirst: runsFirst))
            Console.out("  ✔ verdict: PASS — \(detail)\n")
            return true
        } catch {
            Console.out("  ✘ verdict: FAIL — \(error)\n")
            return false
        }
    }

    /// `EXECUTABLE tour [--list | NAME]` for an executable that runs one scenario: lists it, or
    /// runs it and prints the tour's summary line; returns the exit status.
    package static func tourOfOne(_ scenario: Scenario, arguments: [String]) -> Int32 {
        switch arguments.first {
        case "--list":
            Console.out("\(scenario.name) \(scenario.title)")
            return 0
        case nil, .some(scenario.name):
            if run(scenario, runsFirst: true) {
                Console.out("tour: 1 of 1 scenarios passed")
                return 0
            }
            Console.out("tour: 0 of 1 scenarios passed; failed: \(scenario.name)")
            return 1
        default:
            Console.err(
                "\(executableName) tour: unknown argument '\(arguments.joined(separator: " "))'. Try `\(executableName) --help`.")
            return 2
        }
    }
}
