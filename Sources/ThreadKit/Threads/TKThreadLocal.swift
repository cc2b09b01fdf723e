// TKThreadLocal: a per-thread value on a POSIX thread-specific key. The TKThreadLocal object is
// thread-safe; each thread's slot is read and written only by that thread. At thread exit the
// C library calls the key's destructor on the exiting thread, which releases the boxed value and
// runs the user's destructor with it.
//
// `ThreadLocalKeys.table` (one Protected lock, taken on set, at thread exit and at key creation
// and deletion; never while another ThreadKit lock is held) lists every live key, so a thread's
// exit can tell when all of its TKThreadLocal destructors have run, and every slot a thread holds,
// so a TKThreadLocal dropped while threads still hold values can run their destructors and free
// them instead of leaking them (pthread_key_delete alone forgets them). A slot is finished exactly
// once, by whoever takes it out of the table: its thread's exit, a setter replacing it, or the
// deinit. The exit path identifies its slot by address and owning thread, so a slot freed by a
// deinit racing with the exit (glibc reads the value, then calls the destructor) is never touched.
import Glibc

// safety: immutable after init: a pthread key and a Sendable destructor; each thread's value
// is its own.
/// One value per thread (pthread_key_create/pthread_setspecific). A thread's value starts as nil;
/// when the thread exits with a value set, `destructor` runs on that thread with the value.
/// Deinitialising the TKThreadLocal deletes the key and finishes the values other threads still
/// hold: `destructor` runs for each of them on the deinitialising thread (not on the value's own
/// thread, which can no longer reach the value), and each is freed. Nothing is leaked.
public final class TKThreadLocal<Value>: @unchecked Sendable {
    @usableFromInline let key: pthread_key_t
    private let destructor: (@Sendable (Value) -> Void)?

    /// Creates a new thread-specific key (`pthread_key_create`); every thread's value starts as nil.
    /// `destructor` runs with a thread's value when that thread exits with one set (and for values
    /// still held when this object is deinitialised). Creating more keys than the system allows
    /// (`PTHREAD_KEYS_MAX`) stops the process with a message.
    public init(destructor: (@Sendable (Value) -> Void)? = nil) {
        var key = pthread_key_t()
        let r = pthread_key_create(&key) { raw in
            // Only a slot still in the table is this thread's to finish (see the file comment).
            guard let raw, ThreadLocalKeys.claimAtExit(raw) else { return }
            Unmanaged<ThreadLocalSlot>.fromOpaque(raw).takeRetainedValue().threadDidExit()
        }
        if r != 0 {
            // PTHREAD_KEYS_MAX (1024) keys exist already: there is no slot to hand out.
            fatalError("ThreadKit: pthread_key_create failed (\(SystemCall.errorName(r))): more than 1024 TKThreadLocals are alive")
        }
        self.key = key
        self.destructor = destructor
        ThreadLocalKeys.table.withLock { $0.keys.append(key) }
    }

    deinit {
        // Out of the table first: a thread exiting from now on finishes nothing of this key.
        let orphans = ThreadLocalKeys.table.withLock { table -> [UnsafeMutableRawPointer] in
            table.keys.removeAll { $0 == key }
            var orphans: [UnsafeMutableRawPointer] = []
            for (raw, holding) in table.slots where holding.key == key { orphans.append(raw) }
            for raw in orphans { table.slots[raw] = nil }
            return orphans
        }
        pthread_key_delete(key)
        for raw in orphans { Unmanaged<ThreadLocalSlot>.fromOpaque(raw).takeRetainedValue().threadDidExit() }
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
            let new = newValue.map { Unmanaged.passRetained(Slot($0, destructor)).toOpaque() }
            let owner = pthread_self()
            ThreadLocalKeys.table.withLock { table in
                if let old { table.slots[old] = nil }
                if let new { table.slots[new] = ThreadLocalKeys.Holding(key: key, owner: owner) }
            }
            pthread_setspecific(key, new)
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

/// The keys of every live TKThreadLocal and the slots threads hold in them. A thread's exit
/// (TKThread's end, joiners woken) waits until none of the keys holds a value on it: every
/// TKThreadLocal destructor has run (pthread_join's guarantee). Guarded by the Protected lock;
/// never taken under another ThreadKit lock.
enum ThreadLocalKeys {
    struct Holding {
        let key: pthread_key_t
        let owner: pthread_t
    }

    struct Table {
        var keys: [pthread_key_t] = []
        /// Every slot set and not yet finished, by address: its key and the thread holding it.
        var slots: [UnsafeMutableRawPointer: Holding] = [:]
    }

    static let table = Protected(Table())

    /// Whether the calling thread still holds a value in a TKThreadLocal other than `key` (whose
    /// destructor glibc has not run yet in this round, or that a destructor set again).
    static func anyValueSet(except key: pthread_key_t) -> Bool {
        table.withLock { t in t.keys.contains { $0 != key && pthread_getspecific($0) != nil } }
    }

    /// At thread exit: takes `raw` out of the table if it is still there as a slot of the calling
    /// thread. False when a TKThreadLocal's deinit took it (and finished it) first. The address
    /// alone could name a newer slot allocated at the same place, but only for another thread: no
    /// code of this thread runs between glibc reading the value and calling the destructor.
    static func claimAtExit(_ raw: UnsafeMutableRawPointer) -> Bool {
        let me = pthread_self()
        return table.withLock { t in
            guard let holding = t.slots[raw], pthread_equal(holding.owner, me) != 0 else { return false }
            t.slots[raw] = nil
            return true
        }
    }

    /// Slots still held (tests).
    static var heldSlotCount: Int { table.withLock { $0.slots.count } }
}
