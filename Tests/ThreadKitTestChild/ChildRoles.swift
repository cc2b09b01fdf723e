// ChildRoles: the registry of `ThreadKitTestChild ROLE ...`, the test-only helper executable that
// ThreadKitTests start as real child processes (Tests/ThreadKitTests/Support/ChildProcess.swift) to
// check behaviour that needs a process of its own (its main thread, limits, user, umask, memory,
// signals, an environment set before it starts, a release build) or several processes (the
// distributed lock, ports). Each role documents its exit status and output. A misuse that only has
// to stop the process with a message is a swift-testing exit test in ThreadKitTests instead
// (`#expect(processExitsWith:)`, Tests/ThreadKitTests/Support/MisuseAssertions.swift).
//
// Layout (issue 27): this target is not a product; it is built beside the test bundle because
// ThreadKitTests depends on it, and it links ThreadKit (and CThreadKit) only. The PostgreSQL roles
// live in Tests/ThreadKitPostgresTestChild; the tour's own children in
// Sources/threadkit/Tour/TourChildren.swift (`threadkit tour --child ROLE`). Roles the tour also
// runs (joinable-save, dlock-hold, port-echo, global-executor, global-executor-too-late) are in
// Sources/ChildProcessRoles, a library target both link.
import ChildProcessRoles
import Glibc
import ThreadKit

enum ChildRoles {
    static let all: [ChildRole] =
        ThreadRoles.all + DistributedLockRoles.all + PortRoles.all
        + DispatchMisuseRoles.all + DispatchMainRoles.all + OperationMisuseRoles.all + ConcurrencyRoles.all
        + ExecutorMisuseRoles.all + TaskExecutorRoles.all
        + DispatchSourceKindRoles.all
        + RunLoopIORoles.all + PortHardeningRoles.all + ExtremeInputRoles.all + ThreadLimitRoles.all + DistributedLockUserRoles.all
        + TraceRoles.all + FlightRoles.all
        + DiagnosticsRoles.all + BlockingRoles.all + SymbolicationRoles.all
        + DispatchPoolRoles.all + DispatchMemoryRoles.all + WaitGraphRoles.all + DeadlockRoles.all
        + LockOwnershipRoles.all + SharedChildRoles.all

    static func main(_ arguments: [String]) -> Int32 {
        ChildRole.main(
            all, arguments, header: "usage: ThreadKitTestChild ROLE [ARGUMENT...] (a test helper, started by ThreadKitTests). Roles:")
    }
}
