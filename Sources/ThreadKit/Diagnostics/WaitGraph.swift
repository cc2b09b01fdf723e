// WaitGraph: who waits for whom (docs/Diagnostics.md §6). Every ThreadKit wait that may park — a
// lock's slow path, a condition, a semaphore, a group, `sync` onto a busy queue, `join`,
// `waitUntilFinished`, perform `waitUntilDone` — publishes on its thread's WaitRecord what it
// waits for (`begin`/`end`); queue items, exclusive `sync` blocks and operations publish what the
// thread runs (`beginRunning`/`endRunning`), so a queue's `sync` and an operation's waiter can name
// the thread running it. The thread dump (ThreadDump.swift) reads every record and asks each
// waited-for object for its holder (`WaitTarget.waitHolder`): a lock's owner from its word, a
// thread's id, the runner of a queue or operation, the last signaller of a semaphore.
//
// Switch: recording is on while `.waits` or `.hangs` is on (`WaitGraph.recording`). Every hook is
// `DiagnosticsSwitch.isOn(WaitGraph.recording)`, one relaxed load and a branch, in front of an
// out-of-line slow path; `end` with nothing begun is a test of a nil local.
//
// Threads: a record is created by its own thread (thread-local `local`, listed in `records`) and
// unlisted by the thread-local's destructor when the thread exits. Its `state` is written by its
// thread and read by any dumping thread, both under the record's `mutex` (a leaf; nothing is taken
// under it, and no object is asked anything under it: the dump copies the state out first).
// `records` is a Protected table (its lock a leaf too; no record's mutex is taken under it).
import Synchronization

/// What kind of wait a thread is in, as a thread dump names it.
public enum TKWaitKind: String, Sendable, Hashable, CaseIterable {
    /// A lock's slow path: `TKLock`, `TKRecursiveLock`, `TKCondition` or `TKConditionLock` as a
    /// lock, `TKReadWriteLock` (read or write), the lock of `synchronized`.
    case lock
    /// `TKCondition.wait` or `TKConditionLock.lock(whenCondition:)`: waiting for a signal.
    case condition
    /// `TKDispatchSemaphore.wait`.
    case semaphore
    /// `TKDispatchGroup.wait`.
    case group
    /// `TKDispatchQueue.sync` onto a queue another thread is running.
    case queueSync = "sync"
    /// `TKThread.join`.
    case join
    /// `TKOperation.waitUntilFinished`.
    case operation = "waitUntilFinished"
    /// `TKThread.perform(waitUntilDone: true)`.
    case perform = "perform(waitUntilDone:)"

    /// The kind a dump names `rawValue` (`lock`, `sync`, `waitUntilFinished`, …), or nil. Written
    /// out for its documentation; it is what the compiler would synthesize.
    public init?(rawValue: String) {
        guard let kind = TKWaitKind.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = kind
    }
}

/// Who a waited-for object says holds it, read when a dump is taken.
enum WaitHolder {
    /// This thread holds it: a lock's owner, a joined thread, a perform target.
    case thread(UInt32)
    /// Whichever thread is running this object (a queue, an operation): the dump finds it among
    /// the records' running entries.
    case runner(ObjectIdentifier)
    /// Not a holder, a hint: the thread that last signalled a semaphore or entered a group.
    case hint(UInt32, String)
    /// Nobody known: why (`free`, `held by 3 readers`, `not started`).
    case none(String)
}

/// An object a ThreadKit wait can wait for. Conformances sit beside each type (they read its
/// private state); both members are called by a dumping thread with no diagnostics lock held.
protocol WaitTarget: AnyObject {
    /// `TKLock "ledger"`, `TKDispatchQueue "db"`: how a dump names the object.
    var waitDescription: String { get }
    /// The holder now (a snapshot: a dump reads it twice before naming a deadlock).
    var waitHolder: WaitHolder { get }
}

// safety: `state` is read and written only under `mutex`; `tid` and `thread` are immutable.
/// One thread's published waits and activities.
final class WaitRecord: @unchecked Sendable {
    /// What the thread waits for: the object, the kind of wait and the call that waits.
    struct Wait {
        let target: any WaitTarget
        let kind: TKWaitKind
        let call: StaticString
    }

    /// Something the thread runs: a queue (its item, or an exclusive `sync` block) or an
    /// operation's `start()`. `exclusive`: nothing else of it runs meanwhile.
    struct Running {
        let object: AnyObject
        let exclusive: Bool
    }

    struct State {
        var wait: Wait?
        /// Bumped by every `begin` and `end`: a dump that reads the same value twice knows the
        /// thread stayed in one wait between the reads.
        var generation: UInt64 = 0
        var running: [Running] = []
    }

    let tid: UInt32
    /// The thread's object if ThreadKit made one (for its name and QoS). Immutable.
    let thread: TKThread?
    private let mutex = RawMutex()
    private var state = State() // guarded by mutex

    init(tid: UInt32, thread: TKThread?) {
        self.tid = tid
        self.thread = thread
    }

    /// Publishes `wait`; returns the one it replaces (restored by `restore`). Own thread only.
    func replace(with wait: Wait) -> Wait? {
        let tid = mutex.lockInternal()
        let previous = state.wait
        state.wait = wait
        state.generation &+= 1
        mutex.unlockInternal(tid)
        return previous
    }

    func restore(_ previous: Wait?) {
        let tid = mutex.lockInternal()
        state.wait = previous
        state.generation &+= 1
        mutex.unlockInternal(tid)
    }

    func push(_ running: Running) {
        let tid = mutex.lockInternal()
        state.running.append(running)
        mutex.unlockInternal(tid)
    }

    func pop(_ object: AnyObject) {
        let tid = mutex.lockInternal()
        if let index = state.running.lastIndex(where: { $0.object === object }) { state.running.remove(at: index) }
        mutex.unlockInternal(tid)
    }

    /// A copy of the state (any thread).
    var snapshot: State {
        let tid = mutex.lockInternal()
        defer { mutex.unlockInternal(tid) }
        return state
    }
}

/// The hooks and the list of records.
enum WaitGraph {
    /// Waits are recorded while either feature is on: `.waits` for dumps, `.hangs` so that hang
    /// reports show holders. An inlinable computed property, as the feature constants.
    @inline(__always)
    static var recording: TKDiagnosticsFeature { TKDiagnosticsFeature.waits.union(.hangs) }

    /// A wait begun by `begin`, for the matching `end`.
    struct Token {
        let record: WaitRecord
        let previous: WaitRecord.Wait?
    }

    /// Every thread's record, by identity.
    private static let records = Protected<[ObjectIdentifier: WaitRecord]>([:])
    /// The calling thread's record; the destructor unlists it when the thread exits.
    private static let local = TKThreadLocal<WaitRecord>(destructor: { WaitGraph.unlist($0) })

    // MARK: Hooks (any thread, about itself)

    /// The calling thread is about to wait (`kind`, in `call`) for `target`. Pass the result to
    /// `end` when the wait is over, however it ends.
    @inline(__always)
    static func begin(_ target: any WaitTarget, _ kind: TKWaitKind, _ call: StaticString) -> Token? {
        DiagnosticsSwitch.isOn(recording) ? beginRecorded(target, kind, call) : nil
    }

    @inline(__always)
    static func end(_ token: Token?) {
        if let token { token.record.restore(token.previous) }
    }

    /// The calling thread starts running `object` (a queue's item or exclusive `sync` block, an
    /// operation's `start()`). Returns whether `endRunning` must be called.
    @inline(__always)
    static func beginRunning(_ object: AnyObject, exclusive: Bool) -> Bool {
        guard DiagnosticsSwitch.isOn(recording) else { return false }
        beginRunningRecorded(object, exclusive: exclusive)
        return true
    }

    @inline(never)
    static func endRunning(_ object: AnyObject) {
        local.value?.pop(object)
    }

    @inline(never)
    private static func beginRecorded(_ target: any WaitTarget, _ kind: TKWaitKind, _ call: StaticString) -> Token {
        let record = current
        return Token(record: record, previous: record.replace(with: WaitRecord.Wait(target: target, kind: kind, call: call)))
    }

    @inline(never)
    private static func beginRunningRecorded(_ object: AnyObject, exclusive: Bool) {
        current.push(WaitRecord.Running(object: object, exclusive: exclusive))
    }

    /// The calling thread's record, made and listed on first use.
    private static var current: WaitRecord {
        if let record = local.value { return record }
        let record = WaitRecord(tid: SystemCall.currentThreadID, thread: TKThread.currentIfKnown)
        local.value = record
        records.withLock { $0[ObjectIdentifier(record)] = record }
        return record
    }

    private static func unlist(_ record: WaitRecord) {
        records.withLock { $0[ObjectIdentifier(record)] = nil }
    }

    /// Every listed record (the dump reads each one's state outside the registry lock).
    static var allRecords: [WaitRecord] { records.withLock { Array($0.values) } }
}
