// threadkit: the command-line face of ThreadKit. Links ThreadKit only.
//   threadkit tour            narrated run of every scenario from the seed documents
//   threadkit tour --list     the scenario names
//   threadkit tour NAME...    run only those
//   threadkit tour --counters NAME...  also count contention and print the counters at the end
//   threadkit trace SCENARIO -o FILE.json [--html FILE.html]   a scenario under the trace recorder
// Hidden: `threadkit tour --child ROLE ...`, a tour scenario's child process (Tour/TourChildren.swift).
// Layout (issue 27): the tests' child processes are Tests/ThreadKitTestChild and
// Tests/ThreadKitPostgresTestChild (test-only executables, not products); the PostgreSQL scenario
// is `threadkit-postgres tour` (Sources/threadkit-postgres), so that this tool builds no PostgresNIO.
import ChildProcessRoles
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "tour":
    exit(Tour.main(Array(arguments.dropFirst())))
case "trace":
    exit(TraceScenario.main(Array(arguments.dropFirst())))
case "--help", "-h", "help", nil:
    Console.out(
        """
        usage: threadkit tour [--list] [--counters] [NAME...]
          tour            run every scenario of the seed documents, narrated, each ending with its verdict
          tour --list     list the scenarios
          tour NAME...    run the named scenarios only
          tour --counters NAME...  count lock and queue contention meanwhile and print the counters after
        usage: threadkit trace SCENARIO -o FILE.json [--html FILE.html]
          trace           run a tour scenario under the trace recorder; write Chrome trace-event JSON
                          (chrome://tracing, ui.perfetto.dev) and optionally a self-contained HTML timeline
        """)
    exit(0)
default:
    Console.err("threadkit: unknown command '\(arguments[0])'. Try `threadkit --help`.")
    exit(2)
}
