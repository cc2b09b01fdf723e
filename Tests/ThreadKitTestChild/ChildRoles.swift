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
// global-executor-too-late) have a copy there: the shipped CLI must not depend on test code, and
// the tests judge these roles here.
import Glibc
import ThreadKit

struct ChildRole: Sendable {
    let name: String
    let usage: String
    let run: @Sendable ([String]) -> Int32
}

enum ChildRoles {
    static let all: [ChildRole] =
        MisuseRoles.all + RunLoopMisuseRoles.all + ThreadRoles.all + DistributedLockRoles.all + PortRoles.all
        + DispatchMisuseRoles.all + DispatchMainRoles.all + OperationMisuseRoles.all + ConcurrencyRoles.all + GlobalExecutorRoles.all
        + ExecutorMisuseRoles.all
        + DispatchSurfaceRoles.all + DispatchTargetRoles.all + DispatchSourceKindRoles.all + DispatchDataRoles.all
        + RunLoopIORoles.all + PortHardeningRoles.all + ExtremeInputRoles.all + ThreadLimitRoles.all + DistributedLockUserRoles.all
        + TraceRoles.all
        + DiagnosticsRoles.all
        + DispatchPoolRoles.all

    static func main(_ arguments: [String]) -> Int32 {
        guard let name = arguments.first, let role = all.first(where: { $0.name == name }) else {
            Console.err(
                "usage: ThreadKitTestChild ROLE [ARGUMENT...] (a test helper, started by ThreadKitTests). Roles:\n"
                    + all.map { "  \($0.name) \($0.usage)" }.joined(separator: "\n"))
            return 2
        }
        return role.run(Array(arguments.dropFirst()))
    }
}
