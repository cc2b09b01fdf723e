// TKTraceEvent: one recorded event as the exporter hands it out (docs/DiagnosticsTrace.md §2),
// with its kind and phase. Immutable values; the recording side stores the same fields in C's
// 32-byte tk_trace_event (CThreadKitTrace.h), with the name as an index into the interned names.

/// One event of a trace.
public struct TKTraceEvent: Sendable, Hashable {
    /// What the event is about.
    public enum Kind: UInt16, Sendable, CaseIterable {
        /// A TKThread's lifetime: begin when its entry point starts, end when it finishes.
        case thread = 1
        /// A run-loop pass (one turn of the loop in `run(mode:…)`); `name` is the mode.
        case runLoopPass = 2
        /// A run-loop phase: the observer activity announced (`detail` is its raw value).
        case runLoopPhase = 3
        /// A run loop asleep, waiting for a timer, a source or a port.
        case runLoopSleep = 4
        /// A dispatch item submitted: `name` is the queue label, `detail` the queue's QoS level,
        /// `object` the item's flow id (the same as its `dispatchItem`).
        case dispatchEnqueue = 5
        /// A dispatch item running (begin, end); `object` is its flow id.
        case dispatchItem = 6
        /// An operation's state: `detail` is a `TKTraceEvent.operationState…` value; executing is
        /// a begin, finished an end, cancelled an instant. `name` is the operation's name.
        case operation = 7
        /// A thread waiting for a lock held by another (the contended slow path only).
        case lockWait = 8
        /// A port message sent (`object` is its msgid, `argument` its component count).
        case portSend = 9
        /// A port message handled by its port's delegate (begin, end).
        case portReceive = 10
        /// A mark placed by `TKTrace.mark(_:)`.
        case mark = 11
        /// A Swift concurrency job run by a ThreadKit executor (begin, end): `object` is its task's
        /// id (0 for a job that is not a task), `detail` the job's priority (`TaskPriority`'s raw
        /// value), `name` the executor (a queue's label, `TKRunLoop`, the global executor).
        case task = 12
        /// A Swift concurrency job handed to a ThreadKit executor (an instant on the thread that
        /// enqueued it, the one that resumed the task when a continuation was resumed): the same
        /// fields as `.task`. The exports draw a flow from it to the job's start.
        case taskEnqueue = 13
        /// A task suspended on a ThreadKit object (`await` on a semaphore, a group, an operation, a
        /// thread's end, a stream) resumed by this thread: `object` is the task's id. The exports
        /// draw a flow from it to the task's next job.
        case taskResume = 14
        /// A named interval from user code (`TKTrace.interval(_:_:)`, `TKTrace.beginInterval(_:)`),
        /// begin and end; `object` tells apart intervals that are not nested.
        case interval = 15
        /// A counter's value from user code (`TKTrace.counter(_:_:)`), an instant: `name` is the
        /// counter, `argument` the value's `Double` bit pattern (`counterValue`).
        case counter = 16

        /// The kind whose raw value is `rawValue` (1 through 16, as recorded in C's
        /// `tk_trace_event`), or nil. Written out for its documentation; it is what the compiler
        /// would synthesize.
        public init?(rawValue: UInt16) {
            switch rawValue {
            case 1: self = .thread
            case 2: self = .runLoopPass
            case 3: self = .runLoopPhase
            case 4: self = .runLoopSleep
            case 5: self = .dispatchEnqueue
            case 6: self = .dispatchItem
            case 7: self = .operation
            case 8: self = .lockWait
            case 9: self = .portSend
            case 10: self = .portReceive
            case 11: self = .mark
            case 12: self = .task
            case 13: self = .taskEnqueue
            case 14: self = .taskResume
            case 15: self = .interval
            case 16: self = .counter
            default: return nil
            }
        }

        /// How the timeline names the kind.
        public var label: String {
            switch self {
            case .thread: "thread"
            case .runLoopPass: "run-loop pass"
            case .runLoopPhase: "run-loop phase"
            case .runLoopSleep: "sleep"
            case .dispatchEnqueue: "enqueue"
            case .dispatchItem: "dispatch item"
            case .operation: "operation"
            case .lockWait: "lock wait"
            case .portSend: "port send"
            case .portReceive: "port message"
            case .mark: "mark"
            case .task: "task"
            case .taskEnqueue: "task enqueue"
            case .taskResume: "task resume"
            case .interval: "interval"
            case .counter: "counter"
            }
        }
    }

    /// Where the event stands in a span.
    public enum Phase: UInt8, Sendable {
        /// A span starts (Chrome's `"B"`); the thread's next `.end` of the same kind closes it.
        case begin = 1
        /// A span ends (Chrome's `"E"`).
        case end = 2
        /// A point in time with no duration (Chrome's `"i"`).
        case instant = 3

        /// The phase whose raw value is `rawValue` (1, 2 or 3), or nil. Written out for its
        /// documentation; it is what the compiler would synthesize.
        public init?(rawValue: UInt8) {
            switch rawValue {
            case 1: self = .begin
            case 2: self = .end
            case 3: self = .instant
            default: return nil
            }
        }
    }

    /// `detail` of an `.operation` event: handed to its queue's ready list (an instant).
    public static let operationReady: UInt8 = 1
    /// `detail` of an `.operation` event: it started executing (begins its span).
    public static let operationExecuting: UInt8 = 2
    /// `detail` of an `.operation` event: it finished (ends its span).
    public static let operationFinished: UInt8 = 3
    /// `detail` of an `.operation` event: it was cancelled (an instant).
    public static let operationCancelled: UInt8 = 4

    /// Nanoseconds on CLOCK_MONOTONIC.
    public let timestamp: UInt64
    /// The recording thread's kernel id.
    public let threadID: UInt32
    /// What the event is about.
    public let kind: Kind
    /// Whether it begins or ends a span, or is an instant.
    public let phase: Phase
    /// The queue label, mode, lock, operation or thread name, if any.
    public let name: String?
    /// The object the event is about, by kind: the thread id (`.thread`), the item's flow id
    /// (`.dispatchEnqueue`, `.dispatchItem`), the operation's or lock's identity (`.operation`,
    /// `.lockWait`), the message's msgid (`.portSend`, `.portReceive`), the task's id (`.task`,
    /// `.taskEnqueue`, `.taskResume`), the interval's id (`.interval`); 0 otherwise.
    public let object: UInt64
    /// A number that goes with the event: the message's component count (`.portSend`,
    /// `.portReceive`), the value's bit pattern (`.counter`: see `counterValue`); 0 otherwise.
    public let argument: UInt64
    /// A small code, by kind: the observer activity's raw value (`.runLoopPhase`), the queue's
    /// QoS level, 0 background … 4 userInteractive, 255 unspecified (`.dispatchEnqueue`,
    /// `.dispatchItem`), an `operation…` state constant (`.operation`), the job's priority
    /// (`.task`, `.taskEnqueue`: `TaskPriority`'s raw value, 0 unspecified); 0 otherwise.
    public let detail: UInt8

    /// The value of a `.counter` event (nil for other kinds).
    public var counterValue: Double? { kind == .counter ? Double(bitPattern: argument) : nil }
}

/// The events one thread recorded, oldest first.
public struct TKTraceThread: Sendable {
    /// The kernel thread id.
    public let threadID: UInt32
    /// The thread's name: its TKThread name if it started one, else its OS name.
    public let name: String
    /// The events the thread recorded in the session, oldest first.
    public let events: [TKTraceEvent]
    /// Events its ring dropped because it wrapped (the oldest go first).
    public let overwritten: UInt64
}
