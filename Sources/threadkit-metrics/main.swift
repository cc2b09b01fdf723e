// threadkit-metrics: the tour's metrics scenario, apart from `threadkit` so that the main tour
// builds ThreadKit only (as threadkit-postgres). Links ThreadKitMetrics, swift-metrics and
// swift-prometheus.
//   threadkit-metrics tour          run metrics-prometheus (MetricsScenario.swift)
//   threadkit-metrics tour --list   the scenario's name
//   threadkit-metrics bench [ROUNDS] the cost of metrics on global async (Bench.swift; build in release)
//   threadkit-metrics names COUNT   the cost of COUNT distinct names: creation and scrape (NamesBench.swift)
//   threadkit-metrics tour --child ROLE …  hidden: the tests' child processes (MetricsChildren.swift)
// Runs on the main thread.
import ChildProcessRoles
import Glibc

func tour(_ arguments: [String]) -> Int32 { TourRunner.tourOfOne(MetricsScenario.scenario, arguments: arguments) }

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "tour" where arguments.dropFirst().first == "--child":
    exit(MetricsChildren.main(Array(arguments.dropFirst(2))))
case "tour":
    exit(tour(Array(arguments.dropFirst())))
case "bench":
    exit(Bench.run(Array(arguments.dropFirst())))
case "names":
    exit(NamesBench.run(Array(arguments.dropFirst())))
case "--help", "-h", "help", nil:
    Console.out(
        """
        usage: threadkit-metrics tour [--list]
          tour            run the tour's metrics scenario (metrics-prometheus): a known workload on named
                          queues, a loop and a lock, exported through swift-metrics to a Prometheus registry,
                          served over HTTP by a ThreadKit run-loop server and read back
          tour --list     the scenario's name
          bench [ROUNDS]  the cost of metrics on global async: off, on, on with an exporter (build with -c release)
          names COUNT     the cost of COUNT distinct queue names: creating their series, and a scrape
        The rest of the tour: `swift run threadkit tour`.
        """)
    exit(0)
default:
    Console.err("threadkit-metrics: unknown command '\(arguments[0])'. Try `threadkit-metrics --help`.")
    exit(2)
}
