// TKLocking: the NSLocking protocol, adopted by every mutual-exclusion lock of ThreadKit.

/// A lock with `lock()` and `unlock()` (NSLocking).
public protocol TKLocking: AnyObject, Sendable {
    /// Takes the lock, blocking the calling thread until it can (`NSLocking.lock()`).
    func lock()
    /// Releases the lock the calling thread holds (`NSLocking.unlock()`). Each lock says which
    /// unbalanced or foreign unlocks it detects; those stop the process with a message.
    func unlock()
}

extension TKLocking {
    /// Runs `body` with the lock held and releases it however `body` exits, including by throwing.
    @inlinable
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
