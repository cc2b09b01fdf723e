// ThreadKitTestChild: `ThreadKitTestChild ROLE [ARGUMENT...]` runs one child-process role for
// ThreadKitTests (the registry and the layout: ChildRoles.swift). Not a product and not for users:
// the shipped CLI is `threadkit` (Sources/threadkit), which keeps only `tour` and `trace`.
import ChildProcessRoles
import Glibc

exit(ChildRoles.main(Array(CommandLine.arguments.dropFirst())))
