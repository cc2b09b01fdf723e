// LockOrderThread: on which thread a lock order (or a hang, or a blocking wait) was seen, for
// reports (docs/Diagnostics.md §1, §2, §5). An immutable value; any thread.
import CThreadKit

/// The thread an edge was seen on, for reports.
struct LockOrderThread: Sendable {
    let tid: UInt32
    let name: String

    static func current() -> LockOrderThread {
        let tid = SystemCall.currentThreadID
        return LockOrderThread(tid: tid, name: name(of: tid))
    }

    static func name(of tid: UInt32) -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        guard tk_thread_name(tid, &buffer, 32) > 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    var description: String { name.isEmpty ? "thread \(tid)" : "thread \(tid) \"\(name)\"" }
}
