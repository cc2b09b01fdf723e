// ThreadDump: who waits for whom (docs/Diagnostics.md §6, issue 26 item 2). A dump lists every
// thread ThreadKit knows — the main thread, the threads it started that still run, and every
// thread with a WaitRecord (WaitGraph.swift) — with its name, QoS, state, what it waits for and
// who holds that, and its stack; then it follows the waits from thread to holder, and each cycle
// it finds is a deadlock, named with every edge, as the JVM's thread dump names Java-level
// deadlocks.
//
// How a dump is taken, on the calling thread, with no lock held across steps:
// 1. Copy every record's state (each under its own mutex, one at a time).
// 2. Ask each waited-for object for its holder (`WaitTarget.waitHolder`): a lock's owner word, a
//    thread's id, the thread whose record runs the queue or operation, a semaphore's last signaller.
// 3. Follow thread → holder edges (only real holders, not hints such as a semaphore's last
//    signaller: each thread has at most one), and collect each cycle once.
// 4. Confirm each cycle: read the records of its threads and their holders again. A cycle is named
//    only if every thread is still in the same wait (the record's generation did not move) and
//    every holder is the same, so a wait that ended between the reads is never called a deadlock.
// 5. Name the threads (TKThread names, else the kernel's), read their scheduling and kernel state,
//    and sample the stacks (HangWatchdog.sampleStack: a signal to each thread).
//
// Threads: any thread may take a dump (tests, the dump-signal thread, the hang watchdog).
import CThreadKit
import Glibc

/// A snapshot of the threads ThreadKit knows, what each waits for and who holds it, and the
/// deadlocks among them (docs/Diagnostics.md §6). Waits are recorded while `.waits` (or `.hangs`)
/// is on; `description` is the text `TKDiagnostics.threadDump()` returns.
public struct TKThreadDump: Sendable, CustomStringConvertible {
    /// One wait: what a thread waits for and who holds it.
    public struct Wait: Sendable, Hashable {
        /// The kind of wait.
        public let kind: TKWaitKind
        /// The call that waits: `TKLock.lock()`, `TKDispatchQueue.sync`, `TKThread.join()`, …
        public let call: String
        /// The object waited for: `TKLock "ledger"`, `TKDispatchQueue "db"`, …
        public let object: String
        /// The thread that holds the object (a lock's owner, the thread running a queue or an
        /// operation, a joined or performing thread); nil when nobody, or nobody known, holds it.
        public let holderThreadID: UInt32?
        /// The holder in words: `held by thread 12 "writer"`, `run by thread 9 "tk.worker"`, `last
        /// signalled by thread 7`, `nobody holds it`.
        public let holder: String
    }

    /// One thread.
    public struct ThreadInfo: Sendable {
        /// The kernel thread id.
        public let threadID: UInt32
        /// The TKThread's name, else the kernel's name of the thread (possibly empty).
        public let name: String
        /// The thread's quality of service (`default`, `utility`, …), or `nice N` for a thread
        /// ThreadKit has no object for.
        public let qualityOfService: String
        /// `waiting` (in a ThreadKit wait), else the kernel's state: `running`, `sleeping`, …
        public let state: String
        /// What the thread waits for; nil when it is in no ThreadKit wait.
        public let wait: Wait?
        /// What the thread runs: `an item of TKDispatchQueue "db"`, `operation TKBlockOperation "x"`.
        public let running: [String]
        /// The thread's call stack (empty when not sampled): its call site first, ThreadKit's own
        /// frames folded (docs/Diagnostics.md §7).
        public let callStack: [String]

        /// `thread 12 "writer"`.
        public var label: String { name.isEmpty ? "thread \(threadID)" : "thread \(threadID) \"\(name)\"" }
    }

    /// Threads that wait for each other in a cycle.
    public struct Deadlock: Sendable {
        /// The cycle, one thread per edge: each waits for something the next one holds, and the
        /// last for something the first holds.
        public let threads: [ThreadInfo]

        /// One line per edge: `thread 12 "a" waits in TKLock.lock() for TKLock "x", held by thread 13 "b"`.
        public var edges: [String] {
            threads.map { thread in
                guard let wait = thread.wait else { return thread.label }
                return "\(thread.label) waits in \(wait.call) for \(wait.object), \(wait.holder)"
            }
        }
    }

    /// Every thread ThreadKit knows, the main thread first, then by thread id.
    public let threads: [ThreadInfo]
    /// The deadlocks found (each cycle once).
    public let deadlocks: [Deadlock]

    /// The dump as text: the deadlocks first, then each thread with its wait and its stack.
    public var description: String {
        var text = "ThreadKit thread dump: \(threads.count) thread\(threads.count == 1 ? "" : "s"), process \(getpid())"
        if !DiagnosticsSwitch.isOn(WaitGraph.recording) {
            text += "\n  (waits are not recorded: TK_DIAGNOSTICS=waits or TKDiagnostics.enable(.waits) records them)"
        }
        for deadlock in deadlocks {
            text += "\nThreadKit deadlock: \(deadlock.threads.count) threads wait for each other in a cycle:"
            for edge in deadlock.edges { text += "\n  \(edge)" }
            text += "\n  Fix: take locks and enter queues in one global order, and never wait (sync, join, "
            text += "waitUntilFinished, perform waitUntilDone) for a thread while holding what it needs."
        }
        for thread in threads {
            text += "\n\(thread.label) (QoS \(thread.qualityOfService)): \(thread.state)"
            if let wait = thread.wait { text += " in \(wait.call) for \(wait.object), \(wait.holder)" }
            for activity in thread.running { text += "\n    running \(activity)" }
            for frame in thread.callStack { text += "\n      \(frame)" }
        }
        return text + "\nend of ThreadKit thread dump"
    }
}

extension TKDiagnostics {
    /// Every thread ThreadKit knows: name, QoS, state, what it waits for, the holder and the
    /// stack; a cycle in the wait-for graph is named as a deadlock, with every edge. Waits are
    /// recorded while `.waits` (or `.hangs`) is on (`TK_DIAGNOSTICS=waits`). Each thread's stack is
    /// sampled with a signal (docs/Diagnostics.md §2, §6): a thread sleeping outside ThreadKit may
    /// see its `nanosleep` or `epoll_wait` return early with EINTR.
    public static func threadDump() -> String { captureThreadDump().description }

    /// The thread dump as a value. `includingStacks`: sample each thread's stack (false: no
    /// signal is sent to any thread, for polling the wait graph cheaply).
    public static func captureThreadDump(includingStacks: Bool = true) -> TKThreadDump {
        ThreadDumper.capture(stacks: includingStacks ? .all : .none)
    }
}

/// Takes dumps (see the file comment for the steps).
enum ThreadDumper {
    enum Stacks { case all, waiting, none }

    /// One thread's record as read in step 1, with its wait's holder as read in step 2.
    private struct Read {
        let record: WaitRecord
        let state: WaitRecord.State
        let holder: WaitHolder?
    }

    static func capture(stacks: Stacks) -> TKThreadDump {
        // Steps 1 and 2.
        let reads = WaitGraph.allRecords.map { record -> Read in
            let state = record.snapshot
            return Read(record: record, state: state, holder: state.wait.map { $0.target.waitHolder })
        }
        var runners: [ObjectIdentifier: (tid: UInt32, exclusive: Bool)] = [:]
        for read in reads {
            for running in read.state.running {
                let id = ObjectIdentifier(running.object)
                if runners[id].map({ !$0.exclusive }) ?? true { runners[id] = (read.record.tid, running.exclusive) }
            }
        }
        var byTid: [UInt32: Read] = [:]
        for read in reads { byTid[read.record.tid] = read }
        func holderTid(_ holder: WaitHolder?) -> UInt32? {
            switch holder {
            case .thread(let tid)?: tid
            case .runner(let id)?: runners[id]?.tid
            default: nil
            }
        }
        // Step 3: each waiting thread has at most one edge, so walking from each thread finds
        // every cycle; a cycle is kept once, keyed by its smallest thread id.
        var edges: [UInt32: UInt32] = [:]
        for read in reads where read.state.wait.map({ $0.kind != .condition }) ?? false {
            if let holder = holderTid(read.holder), holder != read.record.tid { edges[read.record.tid] = holder }
        }
        var cycles: [UInt32: [UInt32]] = [:]
        for start in edges.keys {
            var path: [UInt32] = []
            var seen: Set<UInt32> = []
            var tid = start
            while let next = edges[tid], !seen.contains(tid) {
                seen.insert(tid)
                path.append(tid)
                tid = next
            }
            guard let index = path.firstIndex(of: tid) else { continue }
            let cycle = Array(path[index...])
            let smallest = cycle.min()!
            let rotation = cycle.firstIndex(of: smallest)!
            cycles[smallest] = Array(cycle[rotation...] + cycle[..<rotation])
        }
        // Step 4: confirm each cycle against a second reading.
        let confirmed = cycles.values.filter { cycle in
            cycle.allSatisfy { tid in
                guard let first = byTid[tid] else { return false }
                let again = first.record.snapshot
                guard again.generation == first.state.generation, let wait = again.wait else { return false }
                return holderTid(wait.target.waitHolder) == edges[tid]
            }
        }.sorted { $0[0] < $1[0] }
        // Step 5: the threads.
        let main = UInt32(getpid())
        var tids = Set(byTid.keys)
        tids.insert(main)
        for tid in TKThread.startedThreadIDs.withLock({ $0 }) { tids.insert(tid) }
        for read in reads { if let holder = holderTid(read.holder) { tids.insert(holder) } }
        let live = liveThreadIDs()
        let ordered = tids.filter { live.contains($0) || byTid[$0] != nil }.sorted { a, b in
            a == main ? b != main : (b == main ? false : a < b)
        }
        let names = Dictionary(uniqueKeysWithValues: ordered.map { ($0, name(of: $0, byTid[$0]?.record.thread)) })
        func label(_ tid: UInt32) -> String {
            let name = names[tid] ?? LockOrderThread.name(of: tid)
            return name.isEmpty ? "thread \(tid)" : "thread \(tid) \"\(name)\""
        }
        let me = SystemCall.currentThreadID
        var infos: [UInt32: TKThreadDump.ThreadInfo] = [:]
        for tid in ordered {
            let read = byTid[tid]
            let wait = read.flatMap { read in
                read.state.wait.map { describe($0, holder: read.holder, holderTid: holderTid(read.holder), label: label) }
            }
            let sample: Bool
            switch stacks {
            case .all: sample = true
            case .waiting: sample = wait != nil
            case .none: sample = false
            }
            var frames: [String] = []
            if sample {
                let stack = tid == me ? CallStack.capture(skipping: 0) : CallStack(addresses: HangWatchdog.sampleStack(of: tid))
                frames = stack.lines
            }
            infos[tid] = TKThreadDump.ThreadInfo(
                threadID: tid, name: names[tid] ?? "", qualityOfService: qualityOfService(of: tid, read?.record.thread),
                state: wait != nil ? "waiting" : kernelState(of: tid),
                wait: wait, running: read?.state.running.map(describe) ?? [], callStack: frames)
        }
        return TKThreadDump(
            threads: ordered.compactMap { infos[$0] },
            deadlocks: confirmed.map { cycle in TKThreadDump.Deadlock(threads: cycle.compactMap { infos[$0] }) })
    }

    // MARK: Words

    private static func describe(
        _ wait: WaitRecord.Wait, holder: WaitHolder?, holderTid: UInt32?, label: (UInt32) -> String
    ) -> TKThreadDump.Wait {
        var object = wait.target.waitDescription
        if wait.kind == .perform { object = "the run loop of \(object)" }
        let relation: String
        switch wait.kind {
        case .queueSync, .operation, .perform: relation = "run by"
        case .join: relation = "running as"
        default: relation = "held by"
        }
        let words: String
        var holderID: UInt32? = nil
        if wait.kind == .condition {
            words = "until it is signalled"
        } else if let holderTid {
            holderID = holderTid
            words = "\(relation) \(label(holderTid))"
        } else {
            switch holder {
            case .runner?: words = "which no thread is running now"
            case .hint(let tid, let how)?: words = "\(how) \(label(tid))"
            case .none(let why)?: words = why
            case .thread?, nil: words = "holder unknown"
            }
        }
        return TKThreadDump.Wait(kind: wait.kind, call: "\(wait.call)", object: object, holderThreadID: holderID, holder: words)
    }

    private static func describe(_ running: WaitRecord.Running) -> String {
        if let queue = running.object as? TKDispatchQueue {
            return "\(queue.described)\(running.exclusive ? " (exclusively)" : "")"
        }
        if let operation = running.object as? TKOperation { return "operation \(operation.described)" }
        return "\(type(of: running.object))"
    }

    private static func name(of tid: UInt32, _ thread: TKThread?) -> String {
        if let name = thread?.name, !name.isEmpty { return name }
        return LockOrderThread.name(of: tid)
    }

    private static func qualityOfService(of tid: UInt32, _ thread: TKThread?) -> String {
        if let thread { return "\(thread.qualityOfService)" }
        guard let inForce = SchedulingClass.inForce(of: tid) else { return "unknown" }
        let known: [TKQualityOfService] = [.userInteractive, .userInitiated, .default, .utility, .background]
        if let qos = known.first(where: { SchedulingClass($0) == inForce }) { return "\(qos)" }
        return "nice \(inForce.nice)"
    }

    /// The kernel's state letter (/proc/self/task/TID/stat, after the name's closing parenthesis).
    private static func kernelState(of tid: UInt32) -> String {
        let fd = open("/proc/self/task/\(tid)/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "exited" }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0, let close = buffer[0..<n].lastIndex(of: UInt8(ascii: ")")), close + 2 < n else { return "unknown" }
        switch buffer[close + 2] {
        case UInt8(ascii: "R"): return "running"
        case UInt8(ascii: "S"): return "sleeping"
        case UInt8(ascii: "D"): return "in an uninterruptible wait"
        case UInt8(ascii: "T"), UInt8(ascii: "t"): return "stopped"
        case UInt8(ascii: "Z"), UInt8(ascii: "X"): return "exited"
        default: return "unknown"
        }
    }

    /// The process's threads now (/proc/self/task).
    private static func liveThreadIDs() -> Set<UInt32> {
        var live: Set<UInt32> = []
        guard let dir = opendir("/proc/self/task") else { return live }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let tid = UInt32(name) { live.insert(tid) }
        }
        closedir(dir)
        return live
    }
}
