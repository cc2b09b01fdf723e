// TKDispatchQueue+LegacyPriority: Swift Dispatch's deprecated global queue priorities
// (DISPATCH_QUEUE_PRIORITY_HIGH/DEFAULT/LOW/BACKGROUND) mapped to QoS classes as Apple documents
// them (docs/DispatchQueues.md, "Legacy priorities"). Immutable values; any thread.

extension TKDispatchQueue {
    /// DispatchQueue.GlobalQueuePriority: the four priorities of the global queues before QoS.
    public enum GlobalQueuePriority: Sendable, CaseIterable {
        /// `DISPATCH_QUEUE_PRIORITY_HIGH`: the `.userInitiated` global queue.
        case high
        /// `DISPATCH_QUEUE_PRIORITY_DEFAULT`: the `.default` global queue.
        case `default`
        /// `DISPATCH_QUEUE_PRIORITY_LOW`: the `.utility` global queue.
        case low
        /// `DISPATCH_QUEUE_PRIORITY_BACKGROUND`: the `.background` global queue.
        case background

        /// The QoS class Apple maps the priority to: high → userInitiated, default → default,
        /// low → utility, background → background.
        public var qualityOfService: TKQualityOfService {
            switch self {
            case .high: .userInitiated
            case .default: .default
            case .low: .utility
            case .background: .background
            }
        }
    }

    /// The global queue of a legacy priority: the same queue as `global(qos: priority.qualityOfService)`.
    public static func global(priority: GlobalQueuePriority) -> TKDispatchQueue {
        global(qos: priority.qualityOfService)
    }
}
