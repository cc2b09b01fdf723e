// TKQualityOfService: NSQualityOfService, with Foundation's raw values, plus Dispatch's
// `unspecified` (QOS_CLASS_UNSPECIFIED, 0). Immutable values.

/// How important a thread's or a queue's work is. Ordered: unspecified < background < utility <
/// default < userInitiated < userInteractive. On Linux ThreadKit makes it real by mapping each class
/// to a nice value and scheduling policy (see `SchedulingClass`).
///
/// `unspecified` is "no QoS" (DispatchQoS.QoSClass.unspecified): `TKDispatchQueue.global(qos:)`
/// gives the default global queue for it, a custom queue created with it takes its target's level,
/// `concurrentPerform(iterations:qos:execute:)` runs at the caller's level, and a thread or
/// operation with it is scheduled as `default` (docs/DispatchPool.md, "QoS: order, aging, OS
/// priority"). It compares below every other class, as its raw value does in QOS_CLASS order.
public enum TKQualityOfService: Int, Sendable, Comparable {
    /// Work the user is interacting with now (event handling, drawing): the highest class.
    case userInteractive = 0x21
    /// Work the user started and waits for (opening a document).
    case userInitiated = 0x19
    /// The class between user-initiated and utility; what work gets when none is given.
    case `default` = -1
    /// Long-running work the user knows about but does not wait for (downloads, imports).
    case utility = 0x11
    /// Work the user does not see (indexing, backups): the lowest class. Higher classes start
    /// first, but background work is never starved forever.
    case background = 0x09
    /// No QoS given (`DispatchQoS.QoSClass.unspecified`): see the type's discussion.
    case unspecified = 0x00

    /// The class whose raw value is `rawValue` (Foundation's `NSQualityOfService` values, and 0
    /// for `unspecified`), or nil if there is none. Written out for its documentation; it is
    /// what the compiler would synthesize.
    public init?(rawValue: Int) {
        switch rawValue {
        case 0x21: self = .userInteractive
        case 0x19: self = .userInitiated
        case -1: self = .default
        case 0x11: self = .utility
        case 0x09: self = .background
        case 0x00: self = .unspecified
        default: return nil
        }
    }

    /// The position in the importance order (the raw values of `default` break numeric order).
    private var rank: Int {
        switch self {
        case .unspecified: -1
        case .background: 0
        case .utility: 1
        case .default: 2
        case .userInitiated: 3
        case .userInteractive: 4
        }
    }

    /// Whether `lhs` is less important than `rhs`, in the order unspecified < background <
    /// utility < default < userInitiated < userInteractive (not the raw values' numeric order).
    public static func < (lhs: TKQualityOfService, rhs: TKQualityOfService) -> Bool { lhs.rank < rhs.rank }
}
