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

    var current: Value {
        get { mutex.withLock { value } }
        set { mutex.withLock { value = newValue } }
    }
}
