// TraceScenario: `threadkit trace SCENARIO -o FILE.json [--html FILE.html]` (any tour scenario
// under the trace recorder, exported as Chrome trace-event JSON and an HTML timeline) and the
// tour's `trace` scenario: the operation graph recorded as a timeline (docs/DiagnosticsTrace.md).
// Runs on the main thread, like the tour.
import ChildProcessRoles
import Glibc
import ThreadKit

enum TraceScenario {
    static let scenario = Scenario(
        name: "trace", title: "the operation graph recorded as a timeline: Chrome trace JSON and a one-file HTML page",
        source: "issue 16: see what the threads do (thread lifetimes, dispatch items, operation states, lock waits)"
    ) { say in
        let directory = try temporaryDirectory()
        let json = directory + "/operation-graph.json"
        let html = directory + "/operation-graph.html"
        let recorded = try record(OperationScenarios.photoPipeline, narrator: say, json: json, html: html)
        let operations = recorded.threads.flatMap(\.events).filter { $0.kind == .operation && $0.phase == .begin }
        let names = Set(operations.compactMap(\.name))
        say.say(
            "recorded \(recorded.eventCount) events on \(recorded.threads.count) threads (one timeline row each); "
                + "\(operations.count) operations executed: \(names.sorted().joined(separator: ", "))")
        say.say("Chrome trace (chrome://tracing, ui.perfetto.dev): \(json)")
        say.say("timeline page (open in a browser, no network needed): \(html)")
        try say.check(recorded.passed, "the operation-graph scenario failed under the recorder")
        try say.check(
            names.contains("download a.jpg") && names.contains("share album"),
            "the trace is missing operations: \(names.sorted())")
        try say.check(!names.contains("decode b.jpg"), "the cancelled \"decode b.jpg\" shows as executing")
        return "\(recorded.threads.count) rows, \(recorded.eventCount) events; files in \(directory)"
    }

    struct Recorded {
        let threads: [TKTraceThread]
        let passed: Bool
        var eventCount: Int { threads.reduce(0) { $0 + $1.events.count } }
    }

    /// Runs `scenario` while recording, then writes the exports.
    static func record(_ scenario: Scenario, narrator: Narrator, json: String, html: String?) throws -> Recorded {
        TKTrace.start()
        TKTrace.mark("scenario \(scenario.name)")
        var passed = true
        do {
            let detail = try scenario.run(narrator)
            narrator.say("scenario verdict: PASS — \(detail)")
        } catch {
            narrator.say("scenario verdict: FAIL — \(error)")
            passed = false
        }
        TKTrace.stop()
        try TKTrace.writeChromeJSON(to: json)
        if let html { try TKTrace.writeHTML(to: html, title: "ThreadKit trace: \(scenario.name)") }
        return Recorded(threads: TKTrace.threads, passed: passed)
    }

    static func temporaryDirectory() throws -> String {
        var template = Array("/tmp/threadkit-trace-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw ScenarioFailure("mkdtemp failed: errno \(errno)")
        }
        return String(cString: made)
    }

    /// `threadkit trace SCENARIO -o FILE.json [--html FILE.html]`.
    static func main(_ arguments: [String]) -> Int32 {
        var scenarioName: String?
        var json: String?
        var html: String?
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "-o", "--output": json = rest.popFirst()
            case "--html": html = rest.popFirst()
            default: scenarioName = argument
            }
        }
        guard let scenarioName, let json else {
            Console.err("usage: threadkit trace SCENARIO -o FILE.json [--html FILE.html]  (scenarios: `threadkit tour --list`)")
            return 2
        }
        guard let scenario = Tour.scenarios.first(where: { $0.name == scenarioName }) else {
            Console.err("threadkit trace: no scenario named \(scenarioName). See `threadkit tour --list`.")
            return 2
        }
        Console.out("▶ tracing \(scenario.name): \(scenario.title)")
        do {
            let recorded = try record(scenario, narrator: Narrator(scenario: scenario.name, runsFirst: true), json: json, html: html)
            Console.out(
                "trace: \(recorded.eventCount) events on \(recorded.threads.count) threads → \(json)"
                    + (html.map { " and \($0)" } ?? ""))
            return recorded.passed ? 0 : 1
        } catch {
            Console.err("threadkit trace: \(error)")
            return 1
        }
    }
}
