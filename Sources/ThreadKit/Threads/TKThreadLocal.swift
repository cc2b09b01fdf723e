// TKThreadLocal: a per-thread value on a POSIX thread-specific key. The TKThreadLocal object is
// thread-safe; each thread's slot is read and written only by that thread. At thread exit the
// C library calls the key's destructor on the exiting thread, which releases the boxed value and
// runs the user's destructor with it.
import Glibc

/// One value per thread (pthread_key_create/pthread_setspecific). A thread's value starts as nil;
/// when the thread exits with a value set, `destructor` runs on that thread with the value.
/// Deinitialising the TKThreadLocal deletes the key: values other threads still hold are then
/// released without their destructor running (POSIX key semantics).
public final class TKThreadLocal<Value>: @unchecked Sendable {
    private let key: pthread_key_t
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
    }

    deinit {
        pthread_key_delete(key)
    }

    /// This thread's value. Setting nil removes it (without running the destructor).
    public var value: Value? {
        get {
            guard let raw = pthread_getspecific(key) else { return nil }
            return Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue().value
        }
        set {
            if let raw = pthread_getspecific(key) {
                let slot = Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue()
                if let newValue {
                    slot.value = newValue
                    return
                }
                pthread_setspecific(key, nil)
                Unmanaged<Slot>.fromOpaque(raw).release()
                return
            }
            guard let newValue else { return }
            pthread_setspecific(key, Unmanaged.passRetained(Slot(newValue, destructor)).toOpaque())
        }
    }

    /// A thread's value in a box the C destructor can release without knowing `Value`.
    private final class Slot: ThreadLocalSlot {
        var value: Value   // touched only by the thread owning the slot
        let destructor: (@Sendable (Value) -> Void)?
        init(_ value: Value, _ destructor: (@Sendable (Value) -> Void)?) {
            self.value = value
            self.destructor = destructor
        }
        override func threadDidExit() { destructor?(value) }
    }
}

/// The non-generic base of every slot, so the key's C destructor can call into it.
class ThreadLocalSlot {
    func threadDidExit() {}
}
