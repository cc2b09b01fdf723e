// TKLocking: the NSLocking protocol, adopted by every mutual-exclusion lock of ThreadKit.

/// A lock with `lock()` and `unlock()` (NSLocking).
public protocol TKLocking: AnyObject, Sendable {
    func lock()
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
