// TraceRecorder: the recording side of the trace (docs/DiagnosticsTrace.md §1). Hooks call it
// only behind `DiagnosticsSwitch.isOn(.trace)`; each call is out of line so that a hook costs one
// relaxed load and a branch when tracing is off.
//
// Per event (the hot path, no lock, no allocation): the thread's ring comes from a C thread-local
// pointer and the event is stored there by `tk_trace_record`. A name is found in the ring's
// 64-entry cache keyed by the two words of the String (a hit is an exact identity: the cache keeps
// the String alive, so its storage cannot be reused meanwhile), else interned under `registry`.
//
// Rare paths, under `registry` (a leaf Protected): a thread's first event of a session registers
// its ring (resetting its own, taking over a retired one, or allocating one); interning a new name;
// the exporter's copy. Rings are never freed: a ring retired by its thread's exit is handed to a
// later thread once more than `keptRetired` retired rings hold events of the current session.
import CThreadKit

/// One thread's ring and what the Swift side keeps for it.
final class TraceRing: @unchecked Sendable {
    let raw: UnsafeMutablePointer<tk_trace_ring>
    /// The Strings whose two words are in `raw.cache_keys`, kept alive so those words stay unique.
    /// Owning thread only.
    var cachedNames = [String?](repeating: nil, count: 64)
    /// The OS name of the thread when it registered (guarded by the registry).
    var osName = ""
    /// Capacity of `raw.slots` (guarded by the registry).
    var capacity: Int

    init(capacity: Int) {
        raw = .allocate(capacity: 1)
        raw.initialize(to: tk_trace_ring())
        raw.pointee.slots = .allocate(capacity: capacity)
        raw.pointee.mask = UInt64(capacity - 1)
        self.capacity = capacity
        raw.pointee.owner = Unmanaged.passUnretained(self).toOpaque()
    }

    /// Replaces the slots (registry held; the owner is the caller or retired).
    func resize(to newCapacity: Int) {
        raw.pointee.slots.deallocate()
        raw.pointee.slots = .allocate(capacity: newCapacity)
        raw.pointee.mask = UInt64(newCapacity - 1)
        capacity = newCapacity
    }
}

enum TraceRecorder {
    struct Registry {
        var rings: [TraceRing] = []
        /// Events per thread for rings registered from now on (a power of two).
        var capacity = TraceRecorder.defaultCapacity
        /// The session the rings of which the exporter reads; mirrors tk_trace_session.
        var session: UInt64 = 1
        /// Interned names; index 0 is "no name".
        var names: [String] = [""]
        var nameIndex: [String: UInt32] = [:]
    }

    static let defaultCapacity = 16_384
    /// Retired rings of the current session kept for the export before one is reused.
    static let keptRetired = 64
    static let registry = Protected(Registry())

    // MARK: Recording (hot path)

    /// Records one event on the calling thread.
    @inline(never)
    static func record(_ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, name: UInt32 = 0,
                       object: UInt64 = 0, argument: UInt64 = 0, detail: UInt8 = 0) {
        if tk_trace_record(kind.rawValue, phase.rawValue, detail, name, object, argument) != 0 { return }
        _ = currentRing()
        _ = tk_trace_record(kind.rawValue, phase.rawValue, detail, name, object, argument)
    }

    /// Records one event named `name`.
    @inline(never)
    static func record(_ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, named name: String,
                       object: UInt64 = 0, argument: UInt64 = 0, detail: UInt8 = 0) {
        let index = intern(name)
        _ = tk_trace_record(kind.rawValue, phase.rawValue, detail, index, object, argument)
    }

    /// The calling thread's ring for the current session, registering it if needed.
    @inline(__always)
    static func currentRing() -> UnsafeMutablePointer<tk_trace_ring> {
        if let ring = tk_trace_ring_of_current_thread(),
           ring.pointee.session == tk_trace_session_now() { return ring }
        return registerCurrentThread()
    }

    /// The interned index of `name`, through the calling thread's cache.
    static func intern(_ name: String) -> UInt32 {
        let ring = currentRing()
        let (low, high) = unsafeBitCast(name, to: (UInt64, UInt64).self)
        var hash = (low ^ (high &* 0x9E37_79B9_7F4A_7C15)) &* 0xBF58_476D_1CE4_E5B9
        hash ^= hash >> 29
        let slot = Int(hash & 63)
        let keys = tk_trace_cache_keys(ring)!, values = tk_trace_cache_values(ring)!
        if keys[2 * slot] == low && keys[2 * slot + 1] == high && values[slot] != 0 { return values[slot] }
        let index = registry.withLock { r -> UInt32 in
            if let index = r.nameIndex[name] { return index }
            // A program naming every event differently would grow the table without end.
            if r.names.count >= maximumNames { return overflowName(&r) }
            let index = UInt32(r.names.count)
            r.names.append(name)
            r.nameIndex[name] = index
            return index
        }
        let owner = Unmanaged<TraceRing>.fromOpaque(ring.pointee.owner).takeUnretainedValue()
        owner.cachedNames[slot] = name
        keys[2 * slot] = low
        keys[2 * slot + 1] = high
        values[slot] = index
        return index
    }

    /// Distinct names kept (for the process's life); later new names share one placeholder.
    static let maximumNames = 1 << 16

    private static func overflowName(_ r: inout Registry) -> UInt32 {
        let placeholder = "(more than \(maximumNames) names)"
        if let index = r.nameIndex[placeholder] { return index }
        r.names.append(placeholder)
        r.nameIndex[placeholder] = UInt32(r.names.count - 1)
        return UInt32(r.names.count - 1)
    }

    // MARK: Registering (once per thread and session)

    @inline(never)
    static func registerCurrentThread() -> UnsafeMutablePointer<tk_trace_ring> {
        let tid = SystemCall.currentThreadID
        let osName = currentOSName()
        let ring = registry.withLock { r -> TraceRing in
            let ring: TraceRing
            if let mine = tk_trace_ring_of_current_thread() {
                ring = Unmanaged<TraceRing>.fromOpaque(mine.pointee.owner).takeUnretainedValue()
            } else if let reused = reusableRetiredRingLocked(r) {
                ring = reused
            } else {
                ring = TraceRing(capacity: r.capacity)
                r.rings.append(ring)
            }
            if ring.capacity != r.capacity { ring.resize(to: r.capacity) }
            tk_trace_reset(ring.raw, r.session, tid)
            ring.osName = osName
            return ring
        }
        // The cache was cleared by the reset: drop the Strings it kept.
        for i in ring.cachedNames.indices { ring.cachedNames[i] = nil }
        tk_trace_install(ring.raw)
        return ring.raw
    }

    /// A retired ring this thread may take: one of an older session, or the oldest retired one of
    /// this session when more than `keptRetired` are kept. Registry held.
    private static func reusableRetiredRingLocked(_ r: Registry) -> TraceRing? {
        var retiredThisSession: [TraceRing] = []
        for ring in r.rings where tk_trace_is_retired(ring.raw) != 0 {
            if ring.raw.pointee.session != r.session { return ring }
            retiredThisSession.append(ring)
        }
        return retiredThisSession.count > keptRetired ? retiredThisSession.first : nil
    }

    private static func currentOSName() -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        guard tk_trace_thread_name(&buffer, buffer.count) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Sessions

    /// Starts a new session: rings are reset as their threads next record. `capacity`: events per
    /// thread, rounded up to a power of two (at least 64).
    static func beginSession(capacity: Int) {
        var rounded = 64
        while rounded < capacity && rounded < 1 << 26 { rounded <<= 1 }
        registry.withLock { r in
            r.capacity = rounded
            r.session += 1
            tk_trace_session_store(r.session)
        }
    }

    /// Every thread's events of the current session and the name table.
    static func snapshot() -> [TKTraceThread] {
        registry.withLock { r -> [TKTraceThread] in
            var threads: [TKTraceThread] = []
            var buffer = UnsafeMutablePointer<tk_trace_event>.allocate(capacity: r.capacity)
            var bufferCapacity = r.capacity
            defer { buffer.deallocate() }
            for ring in r.rings where ring.raw.pointee.session == r.session {
                if ring.capacity > bufferCapacity {
                    buffer.deallocate()
                    buffer = .allocate(capacity: ring.capacity)
                    bufferCapacity = ring.capacity
                }
                let count = Int(tk_trace_copy(ring.raw, buffer))
                let written = tk_trace_head(ring.raw)
                let tid = ring.raw.pointee.tid
                var events: [TKTraceEvent] = []
                events.reserveCapacity(count)
                for i in 0..<count {
                    let e = buffer[i]
                    guard let kind = TKTraceEvent.Kind(rawValue: e.kind),
                          let phase = TKTraceEvent.Phase(rawValue: e.phase) else { continue }
                    let name = e.name != 0 && Int(e.name) < r.names.count ? r.names[Int(e.name)] : nil
                    events.append(TKTraceEvent(timestamp: e.timestamp, threadID: tid, kind: kind, phase: phase, name: name,
                                               object: e.object, argument: e.argument, detail: e.detail))
                }
                if events.isEmpty { continue }
                // The latest name the thread announced (a TKThread's start) wins over its OS name.
                let announced = events.last { $0.kind == .thread && $0.phase == .begin && $0.name != nil }?.name
                let name = announced ?? (ring.osName.isEmpty ? "thread \(tid)" : ring.osName)
                threads.append(TKTraceThread(threadID: tid, name: name, events: events,
                                             overwritten: written > UInt64(count) ? written - UInt64(count) : 0))
            }
            return mergedByThreadID(threads)
        }
    }

    /// One entry per kernel thread id: a ring recycled within the session by a thread whose id
    /// the kernel reused after the first exited is appended to the first's events (the first
    /// ended before the second began). Ordered by first event.
    private static func mergedByThreadID(_ threads: [TKTraceThread]) -> [TKTraceThread] {
        let ordered = threads.sorted { ($0.events.first?.timestamp ?? 0) < ($1.events.first?.timestamp ?? 0) }
        var merged: [TKTraceThread] = []
        var position: [UInt32: Int] = [:]
        for thread in ordered {
            guard let at = position[thread.threadID] else {
                position[thread.threadID] = merged.count
                merged.append(thread)
                continue
            }
            let earlier = merged[at]
            merged[at] = TKTraceThread(threadID: thread.threadID, name: thread.name, events: earlier.events + thread.events,
                                       overwritten: earlier.overwritten + thread.overwritten)
        }
        return merged
    }
}
