// TKQualityOfService: NSQualityOfService, with Foundation's raw values. Immutable values.

/// How important a thread's or a queue's work is. Ordered: background < utility < default <
/// userInitiated < userInteractive. On Linux ThreadKit makes it real by mapping each class to a
/// nice value and scheduling policy (see `SchedulingClass`).
public enum TKQualityOfService: Int, Sendable, Comparable {
    case userInteractive = 0x21, userInitiated = 0x19, `default` = -1, utility = 0x11, background = 0x09

    /// The position in the importance order (the raw values of `default` break numeric order).
    private var rank: Int {
        switch self {
        case .background: 0
        case .utility: 1
        case .default: 2
        case .userInitiated: 3
        case .userInteractive: 4
        }
    }

    public static func < (lhs: TKQualityOfService, rhs: TKQualityOfService) -> Bool { lhs.rank < rhs.rank }
}
