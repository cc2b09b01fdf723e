// ChildRoles: what `threadkit child ROLE` runs. Tests and the tour start these as real child
// processes to check behaviour that must stop a process (misuse diagnostics) or that needs
// several processes (the distributed lock). Each role documents its exit status and output.
import Glibc
import ThreadKit

struct ChildRole: Sendable {
    let name: String
    let usage: String
    let run: @Sendable ([String]) -> Int32
}

enum ChildRoles {
    static let all: [ChildRole] = MisuseRoles.all + RunLoopMisuseRoles.all + RunLoopRoles.all + ThreadRoles.all + DistributedLockRoles.all + PortRoles.all
        + DispatchMisuseRoles.all + DispatchMainRoles.all + OperationMisuseRoles.all + ConcurrencyRoles.all + GlobalExecutorRoles.all + ExecutorMisuseRoles.all
        + DispatchSurfaceRoles.all + DispatchTargetRoles.all + DispatchSourceKindRoles.all + DispatchDataRoles.all
        + RunLoopIORoles.all + PortHardeningRoles.all + ExtremeInputRoles.all + ThreadLimitRoles.all + DistributedLockUserRoles.all
        + TraceRoles.all
        + DiagnosticsRoles.all
        + DispatchPoolRoles.all
        + PostgresLockRoles.all

    static func main(_ arguments: [String]) -> Int32 {
        guard let name = arguments.first, let role = all.first(where: { $0.name == name }) else {
            Console.err("threadkit child: roles are:\n" + all.map { "  \($0.name) \($0.usage)" }.joined(separator: "\n"))
            return 2
        }
        return role.run(Array(arguments.dropFirst()))
    }
}
