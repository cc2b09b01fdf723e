// ThreadKitGLibTestChild: `ThreadKitGLibTestChild ROLE` runs one child process of
// ThreadKitGLibTests (the roles: GLibRoles.swift). A test-only helper executable, not a product; it
// links ThreadKitGLib (and so glib-2.0), which is why it is apart from Tests/ThreadKitTestChild:
// the core tests never need GLib.
#if GLib
    import ChildProcessRoles
    import Glibc

    exit(
        ChildRole.main(
            GLibRoles.all, Array(CommandLine.arguments.dropFirst()),
            header: "usage: ThreadKitGLibTestChild ROLE (a test helper, started by ThreadKitGLibTests). Roles:"))
#else
    // Built without the GLib trait (Package.swift): nothing here links glib-2.0.
    import ChildProcessRoles
    import Glibc

    Console.err(
        "ThreadKitGLibTestChild: built without ThreadKit's GLib trait; build and run it with `swift run --traits GLib ThreadKitGLibTestChild ...`"
    )
    exit(2)
#endif
