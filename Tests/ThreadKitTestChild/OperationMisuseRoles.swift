// OperationMisuseRoles: child processes that commit one operation misuse each (SPEC §7) and must
// be stopped by ThreadKit with a message naming the operation or queue, the call and the fix.
// Exit status 0 means the misuse went unnoticed, which the tests treat as a failure. (Foundation
// on Linux hangs forever on the wait cases and says nothing on most others.)
import ChildProcessRoles
import ThreadKit

enum OperationMisuseRoles {
    private static func named(_ name: String) -> TKBlockOperation {
        let op = TKBlockOperation {}
        op.name = name
        return op
    }

    private static func queue(_ name: String) -> TKOperationQueue {
        let queue = TKOperationQueue()
        queue.name = name
        return queue
    }

    static let all: [ChildRole] = [
        ChildRole(name: "operation-add-twice", usage: "(add one operation to the same queue twice)") { _ in
            let q = queue("uploads")
            let op = named("upload")
            q.isSuspended = true
            q.addOperation(op)
            q.addOperation(op)
            return 0
        },
        ChildRole(name: "operation-two-queues", usage: "(add one operation to two queues)") { _ in
            let a = queue("uploads")
            let b = queue("thumbnails")
            let op = named("resize")
            a.isSuspended = true
            a.addOperation(op)
            b.addOperation(op)
            return 0
        },
        ChildRole(name: "operation-add-finished", usage: "(add an operation that already ran)") { _ in
            let op = named("done")
            op.start()
            queue("late").addOperation(op)
            return 0
        },
        ChildRole(name: "operation-start-twice", usage: "(start an operation twice)") { _ in
            let op = named("twice")
            op.start()
            op.start()
            return 0
        },
        ChildRole(name: "operation-start-not-ready", usage: "(start an operation whose dependency has not finished)") { _ in
            let op = named("decode")
            let download = named("download")
            try? op.addDependency(download)
            op.start()
            return 0
        },
        ChildRole(name: "operation-start-queued", usage: "(start by hand an operation added to a queue)") { _ in
            let q = queue("parsers")
            let op = named("parse")
            q.isSuspended = true
            q.addOperation(op)
            op.start()
            return 0
        },
        ChildRole(name: "operation-wait-self", usage: "(waitUntilFinished from the operation's own block)") { _ in
            final class Box: @unchecked Sendable { var op: TKOperation? }
            let box = Box()
            let op = TKBlockOperation { box.op?.waitUntilFinished() }
            op.name = "selfish"
            box.op = op
            op.start()
            return 0
        },
        ChildRole(name: "operation-queue-wait-inside", usage: "(waitUntilAllOperationsAreFinished from an operation of that queue)") { _ in
            let q = queue("importer")
            q.addOperation { q.waitUntilAllOperationsAreFinished() }
            q.waitUntilAllOperationsAreFinished()
            return 0
        },
        ChildRole(name: "operation-serial-wait-behind", usage: "(wait, inside a serial queue's operation, for one queued behind it)") { _ in
            let q = queue("serial-db")
            q.maxConcurrentOperationCount = 1
            let later = named("later")
            q.isSuspended = true // both in the queue before the first one waits
            q.addOperation { later.waitUntilFinished() }
            q.addOperation(later)
            q.isSuspended = false
            q.waitUntilAllOperationsAreFinished()
            return 0
        },
        ChildRole(name: "operation-main-wait-on-main", usage: "(wait on the main thread for the main queue)") { _ in
            TKOperationQueue.main.addOperation {}
            TKOperationQueue.main.waitUntilAllOperationsAreFinished()
            return 0
        },
        ChildRole(name: "operation-finish-twice", usage: "(an asynchronous operation calls finish() twice)") { _ in
            final class Twice: TKOperation, @unchecked Sendable {
                override var isAsynchronous: Bool { true }
                override func start() {
                    finish()
                    finish()
                }
            }
            let op = Twice()
            op.name = "fetch"
            op.start()
            return 0
        },
        ChildRole(name: "operation-block-after-start", usage: "(addExecutionBlock after the operation ran)") { _ in
            let op = named("thumbs")
            op.start()
            op.addExecutionBlock {}
            return 0
        },
        ChildRole(name: "operation-negative-limit", usage: "(maxConcurrentOperationCount = -2)") { _ in
            queue("bad").maxConcurrentOperationCount = -2
            return 0
        },
    ]
}
