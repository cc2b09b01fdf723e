// LockName: the thread-safe `name` property shared by the lock classes. Names are read on the
// misuse path and by debuggers, written rarely; a RawMutex guards the string.

final class LockName: @unchecked Sendable {
    private let mutex = RawMutex()
    private var value: String?   // guarded by `mutex`

    deinit { mutex.deallocate() }

    var name: String? {
        get { mutex.withLock { value } }
        set { mutex.withLock { value = newValue } }
    }

    /// `TKLock "store"` or `TKLock 0x…` when unnamed: how misuse messages name a lock.
    func describe(_ kind: String, _ object: AnyObject) -> String {
        if let name { return "\(kind) \"\(name)\"" }
        return "\(kind) \(ObjectIdentifier(object))"
    }
}
