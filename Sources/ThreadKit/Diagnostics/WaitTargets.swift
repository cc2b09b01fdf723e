// WaitTargets: how the waited-for objects whose state ThreadKit code may read name themselves and
// their holder in a thread dump (WaitGraph.swift, docs/Diagnostics.md §6). Types whose state is
// private conform in their own files (TKCondition, TKConditionLock, TKReadWriteLock,
// TKDispatchSemaphore, TKDispatchGroup). Called by a dumping thread with no diagnostics lock held;
// every read is of state that is safe to read from any thread (an atomic word, a Protected value).
import Glibc

extension TKLock: WaitTarget {
    var waitDescription: String { label.describe("TKLock", self) }
    var waitHolder: WaitHolder { raw.waitHolder }
}

extension TKRecursiveLock: WaitTarget {
    var waitDescription: String { label.describe("TKRecursiveLock", self) }
    var waitHolder: WaitHolder { raw.waitHolder }
}

extension RawMutex {
    /// The owner in the word (relaxed: a snapshot, confirmed by a second reading before a deadlock
    /// is named).
    var waitHolder: WaitHolder {
        let owner = owner()
        return owner == 0 ? .none("which nobody holds now") : .thread(owner)
    }
}

extension TKDispatchQueue: WaitTarget {
    var waitDescription: String { described }
    /// The main queue runs only on the main thread; any other queue on the thread whose record
    /// says it runs the queue (an item, or an exclusive `sync` block).
    var waitHolder: WaitHolder { kind == .main ? .thread(UInt32(getpid())) : .runner(ObjectIdentifier(self)) }
}

extension TKThread: WaitTarget {
    var waitDescription: String { "TKThread \(describe())" }
    /// The thread itself, once it runs (its kernel id).
    var waitHolder: WaitHolder {
        let tid = attributes.current.tid
        return tid == 0 ? .none("which has not started") : .thread(tid)
    }
}

extension TKOperation: WaitTarget {
    var waitDescription: String { described }
    /// The thread running its `start()` (recorded by `runFromQueue`).
    var waitHolder: WaitHolder { .runner(ObjectIdentifier(self)) }
}
