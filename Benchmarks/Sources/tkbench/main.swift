// tkbench: ThreadKit against the incumbents. `tkbench` runs every group; `tkbench GROUP…` some;
// `--list` names the groups; `--rounds N` sets the interleaved rounds (default 11). The timer
// lateness table (2 s per timer; `--quick`: 0.5 s) is printed with the runloop group or `timers`.
// `tkbench scaling [--out DIR]` (not part of "every group": it runs a child per CPU count) pins
// each row to 1, 2, 4, 8 and 16 CPUs and writes scaling.csv and scaling.svg to DIR (default .).
// `tkbench stress [--seconds N] [--producers P]` runs the pool's stress workloads for N seconds
// (Stress.swift) and exits non-zero on a wrong count, an out-of-order item or a wedge.
// `--help` lists the commands. Main thread only.
import Foundation

let groups: [(String, () -> [Row])] = [
    ("locks", LockBenchmarks.rows),
    ("conditions", ConditionBenchmarks.rows),
    ("atomics", AtomicBenchmarks.rows),
    ("idle", IdleBenchmarks.rows),
    ("threads", ThreadBenchmarks.rows),
    ("runloop", RunLoopBenchmarks.rows),
    ("ports", PortBenchmarks.rows),
    ("dispatch", DispatchBenchmarks.rows),
    ("operations", OperationBenchmarks.rows),
    ("concurrency", ConcurrencyBenchmarks.rows),
    ("io", { IOBenchmarks.rows() + AsyncIOBenchmarks.rows() }),
    ("trace", TraceBenchmarks.rows),
    ("postgres", PostgresBenchmarks.rows),
    ("glib", GLibBenchmarks.rows),
]

var arguments = Array(CommandLine.arguments.dropFirst())
// The fresh processes of the concurrency group's child rows ("tasks-child tk" installs the global
// executor, so it must run before anything here starts a thread).
if arguments.count == 3, let n = Int(arguments[2]) {
    if arguments[0] == "tasks-child" { exit(ConcurrencyBenchmarks.tasksChild(arguments[1], n)) }
    if arguments[0] == "mainactor-child" { exit(ConcurrencyBenchmarks.mainActorChild(arguments[1], n)) }
    if arguments[0] == "glib-mainactor-child" { exit(GLibBenchmarks.mainActorChild(arguments[1], n)) }
    if arguments[0] == "glib-idle-child" { exit(GLibBenchmarks.idleChild(arguments[1])) }
}
// The other process of the cross-process port row.
if arguments.first == "port-sender" { exit(PortBenchmarks.sender(Array(arguments.dropFirst()))) }
// The fresh process of the "8 items blocking 1 s" row.
if arguments.first == "blocking-child", arguments.count == 2 { exit(DispatchBenchmarks.blockingChild(arguments[1])) }
// The pool's stress run (before anything else starts a pool thread).
if arguments.first == "stress" { exit(Stress.main(Array(arguments.dropFirst()))) }
if arguments.contains("--help") || arguments.first == "help" {
    print(
        """
        tkbench [GROUP…] [--rounds N]       every group, or the named ones (--list names them)
        tkbench timers [--quick]            the timer lateness table alone
        tkbench scaling [--rounds N] [--out DIR]
                                            each row pinned to 1, 2, 4, 8, 16 CPUs; scaling.csv, scaling.svg
        tkbench scaling-child CPUS FILE ROUNDS
                                            one CPU count's rows (TKBENCH_ONLY=text picks rows)
        tkbench stress [--seconds N] [--producers P]
                                            the pool's stress workloads for N s (default 60), exact counts,
                                            per-queue order, a 5 s wedge watchdog; exit 0 only if all match
        tkbench pgqueue [throughput|latency|dag] [--rounds N] [--operations N]
                                            TKPostgresOperationQueue vs a plain SKIP LOCKED loop, 4 worker
                                            processes (needs TK_POSTGRES_URL)
        tkbench --list                      the groups
        """)
    exit(0)
}
// The pinned child of the scaling group.
if arguments.first == "scaling-child", arguments.count == 4, let cpus = Int(arguments[1]), let n = Int(arguments[3]) {
    exit(ScalingRows.child(cpus: cpus, file: arguments[2], rounds: n))
}
// The interactive row's items for one side, for Benchmarks/interactive-breakdown.sh.
if arguments.first == "interactive-samples" { exit(DispatchBenchmarks.interactiveSamples(Array(arguments.dropFirst()))) }
// A contending process of the postgres group.
if arguments.first == "pglock-child" { exit(PostgresBenchmarks.child(Array(arguments.dropFirst()))) }
// TKPostgresOperationQueue against a plain SKIP LOCKED loop, and its worker processes.
if arguments.first == "pgqueue-child" { exit(PostgresQueueBenchmarks.child(Array(arguments.dropFirst()))) }
if arguments.first == "pgqueue" { exit(PostgresQueueBenchmarks.main(Array(arguments.dropFirst()))) }
if arguments.contains("--list") {
    for (name, _) in groups { print(name) }
    print("scaling")
    print("stress")
    exit(0)
}
var rounds = 11
if let i = arguments.firstIndex(of: "--rounds"), i + 1 < arguments.count, let n = Int(arguments[i + 1]) {
    rounds = n
    arguments.removeSubrange(i...(i + 1))
}
var outDirectory = FileManager.default.currentDirectoryPath
if let i = arguments.firstIndex(of: "--out"), i + 1 < arguments.count {
    outDirectory = arguments[i + 1]
    arguments.removeSubrange(i...(i + 1))
}
let selected = arguments.isEmpty ? groups : groups.filter { arguments.contains($0.0) }
let cpu =
    (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
    .split(separator: "\n").first { $0.hasPrefix("model name") }?.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "?"
print("tkbench: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(cpu); \(rounds) interleaved rounds, medians\n")
let harness = Harness(rounds: rounds)
for (_, rows) in selected { harness.run(rows()) }
if arguments.isEmpty || arguments.contains("dispatch") {
    DispatchBenchmarks.blockingAndPriority()
}
if arguments.isEmpty || arguments.contains("operations") {
    OperationBenchmarks.blocking()
}
if arguments.isEmpty || arguments.contains("concurrency") {
    ConcurrencyBenchmarks.millionTasks()
}
if arguments.isEmpty || arguments.contains("runloop") || arguments.contains("timers") {
    RunLoopBenchmarks.timerLateness(seconds: arguments.contains("--quick") ? 0.5 : 2)
}
if arguments.contains("scaling") {
    Scaling.run(rounds: rounds, directory: outDirectory)
}
