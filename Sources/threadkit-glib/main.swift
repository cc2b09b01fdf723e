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

    func tour(_ arguments: [String]) -> Int32 { TourRunner.tourOfOne(GLibScenario.scenario, arguments: arguments) }

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
