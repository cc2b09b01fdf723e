// LockName: the thread-safe `name` property shared by the lock classes. Names are read on the
// misuse path and by debuggers, written rarely.

final class LockName: @unchecked Sendable {
    private let storage = Protected<String?>(nil)

    var name: String? {
        get { storage.current }
        set { storage.current = newValue }
    }

    /// `TKLock "store"` or `TKLock ObjectIdentifier(0x…)` when unnamed: how misuse messages name a lock.
    func describe(_ kind: String, _ object: AnyObject) -> String {
        if let name { return "\(kind) \"\(name)\"" }
        return "\(kind) \(ObjectIdentifier(object))"
    }
}
