// ChildRoles: the registry of `ThreadKitTestChild ROLE ...`, the test-only helper executable that
// ThreadKitTests start as real child processes (Tests/ThreadKitTests/Support/ChildProcess.swift) to
// check behaviour that must stop a process (misuse diagnostics), that needs a process of its own
// (its main thread, limits, user, umask, memory) or several processes (the distributed lock, ports).
// Each role documents its exit status and output.
//
// Layout (issue 27): this target is not a product; it is built beside the test bundle because
// ThreadKitTests depends on it, and it links ThreadKit (and CThreadKit) only. The PostgreSQL roles
// live in Tests/ThreadKitPostgresTestChild; the tour's own children in
// Sources/threadkit/Tour/TourChildren.swift (`threadkit tour --child ROLE`). Roles the tour also
// runs (joinable-save, dlock-hold, port-echo, dispatch-sync-current, global-executor,
// global-executor-too-late) are in Sources/ChildProcessRoles, a library target both link.
import ChildProcessRoles
import Glibc
import ThreadKit

enum ChildRoles {
    static let all: [ChildRole] =
        MisuseRoles.all + RunLoopMisuseRoles.all + ThreadRoles.all + DistributedLockRoles.all + PortRoles.all
        + DispatchMisuseRoles.all + DispatchMainRoles.all + OperationMisuseRoles.all + ConcurrencyRoles.all
        + ExecutorMisuseRoles.all + TaskExecutorRoles.all
        + DispatchSurfaceRoles.all + DispatchTargetRoles.all + DispatchSourceKindRoles.all + DispatchDataRoles.all
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
