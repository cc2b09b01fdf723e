// threadkit-glib: the tour's GLib scenario, apart from `threadkit` so that the main tour builds
// ThreadKit only and needs no glib-2.0 (issue 28). Links ThreadKitGLib (and so glib-2.0).
//   threadkit-glib tour         run glib-main-loop (GLibScenario.swift): a real GMainLoop on the
//                               main thread serving ThreadKit's timers, sources, ports, main queues
//                               and the main actor
//   threadkit-glib tour --list  the scenario's name
// Runs on the main thread (g_main_loop_run is the main thread's loop here).
#if GLib
    import ChildProcessRoles
    import Glibc

    func tour(_ arguments: [String]) -> Int32 {
        let scenario = GLibScenario.scenario
        switch arguments.first {
        case "--list":
            Console.out("\(scenario.name) \(scenario.title)")
            return 0
        case nil, .some(scenario.name):
            Console.out("▶ \(scenario.name): \(scenario.title)")
            Console.out("  (\(scenario.source))")
            do {
                let detail = try scenario.run(Narrator())
                Console.out("  ✔ verdict: PASS — \(detail)\n")
                Console.out("tour: 1 of 1 scenarios passed")
                return 0
            } catch {
                Console.out("  ✘ verdict: FAIL — \(error)\n")
                Console.out("tour: 0 of 1 scenarios passed; failed: \(scenario.name)")
                return 1
            }
        default:
            Console.err("threadkit-glib tour: unknown argument '\(arguments.joined(separator: " "))'. Try `threadkit-glib --help`.")
            return 2
        }
    }

    let arguments = Array(CommandLine.arguments.dropFirst())
    switch arguments.first {
    case "tour":
        exit(tour(Array(arguments.dropFirst())))
    case "--help", "-h", "help", nil:
        Console.out(
            """
            usage: threadkit-glib tour [--list]
              tour            run the tour's GLib scenario (glib-main-loop): g_main_loop_run on the main thread
                              serving ThreadKit's timers, sources, ports, main queues and the main actor
              tour --list     the scenario's name
            The rest of the tour: `swift run threadkit tour`.
            """)
        exit(0)
    default:
        Console.err("threadkit-glib: unknown command '\(arguments[0])'. Try `threadkit-glib --help`.")
        exit(2)
    }
#else
    // Built without the GLib trait (Package.swift): nothing here links glib-2.0.
    import ChildProcessRoles
    import Glibc

    Console.err(
        "threadkit-glib: built without ThreadKit's GLib trait; build and run it with `swift run --traits GLib threadkit-glib ...` (needs libglib2.0-dev)"
    )
    exit(2)
#endif
