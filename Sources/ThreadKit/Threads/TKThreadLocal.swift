// TKThreadLocal: a per-thread value on a POSIX thread-specific key. The TKThreadLocal object is
// thread-safe; each thread's slot is read and written only by that thread. At thread exit the
// C library calls the key's destructor on the exiting thread, which releases the boxed value and
// runs the user's destructor with it. `ThreadLocalKeys.live` lists every live key (guarded by its
// lock), so a thread's exit can tell when all of its TKThreadLocal destructors have run.
import Glibc

/// One value per thread (pthread_key_create/pthread_setspecific). A thread's value starts as nil;
/// when the thread exits with a value set, `destructor` runs on that thread with the value.
/// Deinitialising the TKThreadLocal deletes the key: values other threads still hold are then
/// released without their destructor running (POSIX key semantics).
public final class TKThreadLocal<Value>: @unchecked Sendable {
    @usableFromInline let key: pthread_key_t
    private let destructor: (@Sendable (Value) -> Void)?

    public init(destructor: (@Sendable (Value) -> Void)? = nil) {
        var key = pthread_key_t()
        let r = pthread_key_create(&key) { raw in
            guard let raw else { return }
            Unmanaged<ThreadLocalSlot>.fromOpaque(raw).takeRetainedValue().threadDidExit()
        }
        if r != 0 {
            // PTHREAD_KEYS_MAX (1024) keys exist already: there is no slot to hand out.
            fatalError("ThreadKit: pthread_key_create failed (\(SystemCall.errorName(r))): more than 1024 TKThreadLocals are alive")
        }
        self.key = key
        self.destructor = destructor
        ThreadLocalKeys.live.withLock { $0.append(key) }
    }

    deinit {
        ThreadLocalKeys.live.withLock { keys in keys.removeAll { $0 == key } }
        pthread_key_delete(key)
    }

    /// This thread's value. Setting nil removes it (without running the destructor).
    /// The getter is inlinable: a read is pthread_getspecific plus one load in the caller.
    public var value: Value? {
        @inlinable get {
            guard let raw = pthread_getspecific(key) else { return nil }
            return Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue().value
        }
        set {
            // A slot's value never changes (reads need no exclusivity check): a new value gets a
            // new slot, and the old one is released without its destructor.
            let old = pthread_getspecific(key)
            pthread_setspecific(key, newValue.map { Unmanaged.passRetained(Slot($0, destructor)).toOpaque() })
            if let old { Unmanaged<Slot>.fromOpaque(old).release() }
        }
    }

    /// A thread's value in a box the C destructor can release without knowing `Value`.
    @usableFromInline
    final class Slot: ThreadLocalSlot {
        @usableFromInline let value: Value
        let destructor: (@Sendable (Value) -> Void)?
        init(_ value: Value, _ destructor: (@Sendable (Value) -> Void)?) {
            self.value = value
            self.destructor = destructor
        }
        override func threadDidExit() { destructor?(value) }
    }
}

/// The non-generic base of every slot, so the key's C destructor can call into it.
@usableFromInline
class ThreadLocalSlot {
    func threadDidExit() {}
}

/// The keys of every live TKThreadLocal. A thread's exit (TKThread's end, joiners woken) waits
/// until none of them holds a value on it: every TKThreadLocal destructor has run (pthread_join's
/// guarantee). Guarded by the Protected lock; taken only at key creation and deletion and in a
/// thread's exit, never under another ThreadKit lock.
enum ThreadLocalKeys {
    static let live = Protected<[pthread_key_t]>([])

    /// Whether the calling thread still holds a value in a TKThreadLocal other than `key` (whose
    /// destructor glibc has not run yet in this round, or that a destructor set again).
    static func anyValueSet(except key: pthread_key_t) -> Bool {
        live.withLock { keys in keys.contains { $0 != key && pthread_getspecific($0) != nil } }
    }
}
