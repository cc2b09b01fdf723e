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
//
// Budget: the rings of one session share `totalCapacity` slots. A registering thread gets the
// session's per-thread `capacity` while the budget lasts, then what is left of it (a power of
// two), never less than `minimumCapacity`; once the budget is spent, a new thread takes over the
// ring of a thread that exited (the one registered first) when there is one. So a session's rings
// hold at most `totalCapacity` + `minimumCapacity` × (live threads) events, and so does an export:
// its size follows the budget, not the number of threads times the per-thread capacity.
//
// Flight mode (FlightRecorder.swift): the same rings and budget (2^19 slots by default when
// TK_DIAGNOSTICS has `flight`); a retired ring whose last event is older than the flight window
// holds nothing a dump would keep, so a registering thread takes it over first.
import CThreadKit

// safety: `raw` is written by its owning thread and read by dumps through the C ring's
// own protocol; `cachedNames` is the owning thread's only; the rest only under the registry's lock.
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
    /// When it was last registered, in registrations since launch (guarded by the registry): the
    /// smallest among retired rings marks the one to take over first.
    var registeredAt = 0

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
        /// Slots all rings of the session share (at least `capacity`); the flight recorder's smaller
        /// budget when TK_DIAGNOSTICS turned it on at launch.
        var totalCapacity =
            DiagnosticsSwitch.isOn(.flightRecorder) ? FlightRecorder.defaultTotalCapacity : TraceRecorder.defaultTotalCapacity
        /// Registrations since launch (stamps `TraceRing.registeredAt`).
        var registrations = 0
        /// The session the rings of which the exporter reads; mirrors tk_trace_session.
        var session: UInt64 = 1
        /// Interned names; index 0 is "no name".
        var names: [String] = [""]
        var nameIndex: [String: UInt32] = [:]
    }

    static let defaultCapacity = 16_384
    /// Slots all rings of a session share by default: 2^20 events, 32 MiB.
    static let defaultTotalCapacity = 1 << 20
    /// The smallest ring a registering thread gets, however spent the budget.
    static let minimumCapacity = 64
    /// Retired rings of the current session kept for the export before one is reused.
    static let keptRetired = 64
    static let registry = Protected(Registry())

    /// `registry.assertHeld`, in debug builds only: in a release build even an empty check would
    /// still touch `registry` (its lazy initialisation), so the check is left out here as a whole.
    @inline(__always)
    private static func assertRegistryHeld(function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line) {
        #if DEBUG
            registry.assertHeld("TraceRecorder.registry", function: function, file: file, line: line)
        #endif
    }

    // MARK: Recording (hot path)

    /// Records one event on the calling thread.
    @inline(never)
    static func record(
        _ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, name: UInt32 = 0,
        object: UInt64 = 0, argument: UInt64 = 0, detail: UInt8 = 0
    ) {
        if tk_trace_record(kind.rawValue, phase.rawValue, detail, name, object, argument) != 0 { return }
        _ = currentRing()
        _ = tk_trace_record(kind.rawValue, phase.rawValue, detail, name, object, argument)
    }

    /// Records one event named `name`.
    @inline(never)
    static func record(
        _ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, named name: String,
        object: UInt64 = 0, argument: UInt64 = 0, detail: UInt8 = 0
    ) {
        let index = intern(name)
        _ = tk_trace_record(kind.rawValue, phase.rawValue, detail, index, object, argument)
    }

    /// The calling thread's ring for the current session, registering it if needed.
    @inline(__always)
    static func currentRing() -> UnsafeMutablePointer<tk_trace_ring> {
        if let ring = tk_trace_ring_of_current_thread(),
            ring.pointee.session == tk_trace_session_now()
        {
            return ring
        }
        return registerCurrentThread()
    }

    /// The interned index of `name`, through the calling thread's cache.
    static func intern(_ name: String) -> UInt32 {
        let ring = currentRing()
        let (low, high) = unsafeBitCast(name, to: (UInt64, UInt64).self)
        var hash = (low ^ (high &* 0x9E37_79B9_7F4A_7C15)) &* 0xBF58_476D_1CE4_E5B9
        hash ^= hash >> 29
        let slot = Int(hash & 63)
        let keys = tk_trace_cache_keys(ring)!
        let values = tk_trace_cache_values(ring)!
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
            var ring: TraceRing?
            if let mine = tk_trace_ring_of_current_thread() {
                ring = Unmanaged<TraceRing>.fromOpaque(mine.pointee.owner).takeUnretainedValue()
            } else {
                ring = reusableRetiredRingLocked(r)
            }
            var size = ringCapacityLocked(r, for: ring)
            if ring == nil && size == minimumCapacity && sessionSlotsLocked(r, excluding: nil) + size > r.totalCapacity,
                let oldest = oldestRetiredRingLocked(r)
            {
                // The budget is spent: take over the ring of a thread that exited, not more memory.
                ring = oldest
                size = ringCapacityLocked(r, for: oldest)
            }
            let chosen: TraceRing
            if let ring {
                chosen = ring
                if chosen.capacity != size { chosen.resize(to: size) }
            } else {
                chosen = TraceRing(capacity: size)
                r.rings.append(chosen)
            }
            r.registrations += 1
            chosen.registeredAt = r.registrations
            tk_trace_reset(chosen.raw, r.session, tid)
            chosen.osName = osName
            return chosen
        }
        // The cache was cleared by the reset: drop the Strings it kept.
        for i in ring.cachedNames.indices { ring.cachedNames[i] = nil }
        tk_trace_install(ring.raw)
        return ring.raw
    }

    /// Slots the current session's rings hold, `ring`'s aside. Registry held.
    private static func sessionSlotsLocked(_ r: Registry, excluding ring: TraceRing?) -> Int {
        assertRegistryHeld()
        return r.rings.reduce(0) { sum, other in
            other !== ring && other.raw.pointee.session == r.session ? sum + other.capacity : sum
        }
    }

    /// The capacity `ring` (nil: a new one) gets for the session: the per-thread capacity while the
    /// budget lasts, else the largest power of two left of it, at least `minimumCapacity`.
    private static func ringCapacityLocked(_ r: Registry, for ring: TraceRing?) -> Int {
        assertRegistryHeld()
        let left = r.totalCapacity - sessionSlotsLocked(r, excluding: ring)
        if left >= r.capacity { return r.capacity }
        var size = minimumCapacity
        while size * 2 <= left { size *= 2 }
        return size
    }

    /// A retired ring this thread may take: one of an older session, or the oldest retired one of
    /// this session when more than `keptRetired` are kept. Registry held.
    private static func reusableRetiredRingLocked(_ r: Registry) -> TraceRing? {
        assertRegistryHeld()
        var retiredThisSession = 0
        let window = FlightRecorder.activeWindowNanoseconds
        let now = window == nil ? 0 : tk_trace_now()
        for ring in r.rings where tk_trace_is_retired(ring.raw) != 0 {
            if ring.raw.pointee.session != r.session { return ring }
            if let window, now > window, lastEventTime(ring) < now - window { return ring }
            retiredThisSession += 1
        }
        return retiredThisSession > keptRetired ? oldestRetiredRingLocked(r) : nil
    }

    /// The time of a retired ring's last event (0 when empty). Registry held; its thread has
    /// exited (the acquiring load of `retired` orders its last stores before these loads).
    private static func lastEventTime(_ ring: TraceRing) -> UInt64 {
        let head = tk_trace_head(ring.raw)
        guard head > 0 else { return 0 }
        return ring.raw.pointee.slots[Int((head - 1) & ring.raw.pointee.mask)].timestamp
    }

    /// Bytes held by every ring ever made (they are never freed): slots, the C header with its
    /// name cache, and the Swift side's cached Strings. What the flight recorder's bound is about.
    static var ringMemory: Int {
        registry.withLock { r in
            r.rings.reduce(0) {
                $0 + $1.capacity * MemoryLayout<tk_trace_event>.stride + MemoryLayout<tk_trace_ring>.stride
                    + 64 * MemoryLayout<String?>.stride // cachedNames: its count never changes (owner-only array)
            }
        }
    }

    /// The retired ring of this session registered first. Registry held.
    private static func oldestRetiredRingLocked(_ r: Registry) -> TraceRing? {
        assertRegistryHeld()
        return r.rings.filter { tk_trace_is_retired($0.raw) != 0 && $0.raw.pointee.session == r.session }
            .min { $0.registeredAt < $1.registeredAt }
    }

    private static func currentOSName() -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        guard tk_trace_thread_name(&buffer, buffer.count) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Sessions

    /// Starts a new session: rings are reset as their threads next record. `capacity`: events per
    /// thread, rounded up to a power of two (at least 64); `totalCapacity`: slots the session's
    /// rings share (at least `capacity`).
    static func beginSession(capacity: Int, totalCapacity: Int = defaultTotalCapacity) {
        var rounded = minimumCapacity
        while rounded < capacity && rounded < 1 << 26 { rounded <<= 1 }
        registry.withLock { r in
            r.capacity = rounded
            r.totalCapacity = min(max(totalCapacity, rounded), 1 << 30)
            r.session += 1
            tk_trace_session_store(r.session)
        }
    }

    /// The current session's rings, copied under the registry lock in one go.
    static func capture() -> TraceCapture {
        registry.withLock { r -> TraceCapture in
            let rings = r.rings.filter { $0.raw.pointee.session == r.session }
            let total = rings.reduce(0) { $0 + $1.capacity }
            var segments: [TraceCapture.Segment] = []
            segments.reserveCapacity(rings.count)
            let events = [tk_trace_event](unsafeUninitializedCapacity: total) { buffer, initialized in
                var offset = 0
                for ring in rings {
                    // safety: `buffer` has room for every ring's capacity; tk_trace_copy writes at
                    // most `ring.capacity` events at the offset, which the sum leaves free.
                    guard let base = buffer.baseAddress else { break }
                    let count = Int(tk_trace_copy(ring.raw, base + offset))
                    segments.append(
                        TraceCapture.Segment(
                            start: offset, count: count, tid: ring.raw.pointee.tid,
                            osName: ring.osName, written: tk_trace_head(ring.raw)))
                    offset += count
                }
                initialized = offset
            }
            return TraceCapture(events: events, segments: segments, names: r.names)
        }
    }

    /// Every thread's events of the current session, in order of first event.
    static func snapshot() -> [TKTraceThread] { capture().allThreads() }
}
