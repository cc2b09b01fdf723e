// JobPriority+QoS: Swift's task and job priorities and ThreadKit's quality-of-service classes are
// one scale (docs/Concurrency.md §2). TaskPriority's raw values are Darwin's QoS classes, which are
// also TKQualityOfService's raw values (except `.default`, -1 here, 0x15 there). Pure functions.

extension TKQualityOfService {
    /// The class of a Swift priority raw value: a value between two classes maps to the lower one;
    /// 0 (unspecified) maps to `.default`.
    init(priorityRawValue raw: UInt8) {
        switch raw {
        case 0: self = .default
        case 0x21...: self = .userInteractive
        case 0x19...: self = .userInitiated
        case 0x15...: self = .default
        case 0x11...: self = .utility
        default: self = .background
        }
    }

    /// The class of a task priority: `.high` is userInitiated, `.medium` default, `.low` utility,
    /// `.background` background.
    public init(_ priority: TaskPriority) { self.init(priorityRawValue: priority.rawValue) }

    /// The task priority of this class (userInteractive is a raw value above `.high`).
    public var taskPriority: TaskPriority {
        TaskPriority(rawValue: self == .default ? 0x15 : UInt8(rawValue))
    }
}

extension UnownedJob {
    /// The class the job's priority asks for.
    var qualityOfService: TKQualityOfService { TKQualityOfService(priorityRawValue: priority.rawValue) }
}
