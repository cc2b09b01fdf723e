// OperationMisuseRoles: the one operation misuse (SPEC §7) that needs the process's main thread:
// waiting on it for the main queue, which ThreadKit stops with a message naming the queue, the
// call and the fix. Exit status 0 means the misuse went unnoticed. The other operation misuses
// are exit tests (Tests/ThreadKitTests/OperationMisuseTests.swift).
import ChildProcessRoles
import ThreadKit

enum OperationMisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "operation-main-wait-on-main", usage: "(wait on the main thread for the main queue)") { _ in
            TKOperationQueue.main.addOperation {}
            TKOperationQueue.main.waitUntilAllOperationsAreFinished()
            return 0
        }
    ]
}
