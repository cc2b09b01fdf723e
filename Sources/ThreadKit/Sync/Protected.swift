// Protected: a value guarded by a RawMutex, for ThreadKit's own rarely-contended bookkeeping
// (lock names, thread attributes, registries). Any thread; the mutex is a leaf lock: `body` must
// not take other ThreadKit locks or block.

// safety: `value` is read and written only under `mutex`.
final class Protected<Value>: @unchecked Sendable {
    private let mutex = RawMutex()
    private var value: Value // guarded by `mutex`

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try mutex.withLock { try body(&value) }
    }

    /// Debug builds: stops the process unless the calling thread is inside `withLock` (for code
    /// handed the value by a `withLock` body). Release builds: nothing.
    @inline(__always)
    func assertHeld(
        _ lock: StaticString, function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line
    ) {
        mutex.assertHeld(lock, function: function, file: file, line: line)
    }

    var current: Value {
        get { mutex.withLock { value } }
        set { mutex.withLock { value = newValue } }
    }
}
