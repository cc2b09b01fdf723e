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
    case userInteractive = 0x21, userInitiated = 0x19, `default` = -1, utility = 0x11, background = 0x09
    case unspecified = 0x00

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

    public static func < (lhs: TKQualityOfService, rhs: TKQualityOfService) -> Bool { lhs.rank < rhs.rank }
}
