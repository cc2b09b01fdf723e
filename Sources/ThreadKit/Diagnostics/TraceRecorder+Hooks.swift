// TraceRecorder+Hooks: what each subsystem's hook records (docs/DiagnosticsTrace.md §2). Every
// call site reads `if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.… }` (dispatch items test
// the flow id their enqueue stored instead); these functions are out of line so that the site
// stays one load and a branch. They run on the thread the event happens on.
import CThreadKit

extension TraceRecorder {
    // MARK: Threads

    /// A TKThread's entry point begins (on the new thread).
    @inline(never)
    static func threadStarted(_ thread: TKThread) {
        record(
            .thread, .begin, named: thread.name ?? "TKThread \(SystemCall.currentThreadID)",
            object: UInt64(SystemCall.currentThreadID))
    }

    /// A TKThread's entry point has returned (or it called exit()), on that thread.
    @inline(never)
    static func threadFinished() {
        record(.thread, .end, object: UInt64(SystemCall.currentThreadID))
    }

    // MARK: Run loops

    @inline(never)
    static func runLoopPass(_ phase: TKTraceEvent.Phase, _ mode: TKRunLoop.Mode) {
        record(.runLoopPass, phase, named: mode.rawValue)
    }

    @inline(never)
    static func runLoopSleep(_ phase: TKTraceEvent.Phase, _ mode: TKRunLoop.Mode) {
        record(.runLoopSleep, phase, named: mode.rawValue)
    }

    /// An observer activity (the pass's phase) announced.
    @inline(never)
    static func runLoopActivity(_ activity: TKRunLoopActivity, _ mode: TKRunLoop.Mode) {
        record(.runLoopPhase, .instant, named: mode.rawValue, detail: UInt8(truncatingIfNeeded: activity.rawValue))
    }

    // MARK: Dispatch

    /// Whether the item being submitted is traced, with the switch's `features` loaded once by
    /// the caller: every item of a full trace (`TKTrace.start`); in flight mode the ones the
    /// submitting thread samples (tk_trace_sample_item: every item while it submits sparsely,
    /// about one per 16 µs while it floods the pool), so the recorder costs the submitter an
    /// inlined countdown per item; an item not sampled records nothing anywhere, and a sampled
    /// one its enqueue, begin and end.
    @inline(__always)
    static func tracesItem(_ features: TKDiagnosticsFeature) -> Bool {
        features.contains(.trace) && (!features.contains(.flightRecorder) || tk_trace_sample_item() != 0)
    }

    /// A traced item submitted to `queue` (`tracesItem` said so): records the enqueue and returns
    /// the item's flow id (32 bits: they ride in the entry's padding), which the entry carries to
    /// its start. Flow ids come from per-thread blocks (tk_trace_next_flow): no shared atomic per
    /// item.
    @inline(never)
    static func dispatchEnqueued(_ queue: TKDispatchQueue) -> UInt32 {
        let flow = tk_trace_next_flow()
        record(.dispatchEnqueue, .instant, named: queue.label, object: UInt64(flow), detail: qosLevel(queue.qos))
        return flow
    }

    /// A traced item starts or ends, inside the queue it belongs to (its frame is pushed).
    @inline(never)
    static func dispatchItem(_ phase: TKTraceEvent.Phase, flow: UInt32) {
        let queue = DispatchContext.existing?.innermost
        record(
            .dispatchItem, phase, named: queue?.label ?? "dispatch", object: UInt64(flow),
            detail: queue.map { qosLevel($0.qos) } ?? 255)
    }

    /// 0 background … 4 userInteractive; 255 unspecified (TraceTimeline.qosName).
    static func qosLevel(_ qos: TKQualityOfService) -> UInt8 {
        switch qos {
        case .background: 0
        case .utility: 1
        case .default: 2
        case .userInitiated: 3
        case .userInteractive: 4
        case .unspecified: 255
        }
    }

    // MARK: Operations

    /// An operation's state changed: `executing` begins its span, `finished` ends it, `ready`
    /// (handed to its queue's ready list) and `cancelled` are instants.
    @inline(never)
    static func operation(_ operation: TKOperation, _ state: UInt8) {
        let phase: TKTraceEvent.Phase =
            switch state {
            case TKTraceEvent.operationExecuting: .begin
            case TKTraceEvent.operationFinished: .end
            default: .instant
            }
        let id = UInt64(UInt(bitPattern: ObjectIdentifier(operation).hashValue))
        record(.operation, phase, named: operation.name ?? "\(type(of: operation))", object: id, detail: state)
    }

    // MARK: Locks (contended slow paths only)

    @inline(never)
    static func lockWait(_ phase: TKTraceEvent.Phase, _ lock: AnyObject, name: String) {
        record(.lockWait, phase, named: name, object: UInt64(UInt(bitPattern: ObjectIdentifier(lock).hashValue)))
    }

    // MARK: Ports

    @inline(never)
    static func portSent(_ message: TKPortMessage) {
        record(.portSend, .instant, object: UInt64(message.msgid), argument: UInt64(message.components.count))
    }

    @inline(never)
    static func portMessage(_ phase: TKTraceEvent.Phase, _ message: TKPortMessage) {
        record(.portReceive, phase, object: UInt64(message.msgid), argument: UInt64(message.components.count))
    }
}
