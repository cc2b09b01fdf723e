// TKNotification: what a notification center delivers (NSNotification). Immutable values.

// safety: immutable; the sender (`object`) is never used by ThreadKit except to compare its
// identity, as NSNotification's: what an observer does with it is the poster's contract.
/// A notification: a name, an optional sender and optional user info.
public struct TKNotification: @unchecked Sendable {
    /// A notification name.
    public struct Name: Hashable, Sendable, RawRepresentable, ExpressibleByStringLiteral, CustomStringConvertible {
        /// The name's string; two names are equal when their strings are.
        public let rawValue: String
        /// The name spelled `rawValue`.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// The name spelled `rawValue` (`RawRepresentable`).
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The name spelled by a string literal: `let didLoad: TKNotification.Name = "AppDidLoad"`.
        public init(stringLiteral value: String) { rawValue = value }
        /// The name's string, ``rawValue``.
        public var description: String { rawValue }
    }

    /// What happened; observers register for names.
    public let name: Name
    /// The sender. Compared by identity when matching observers.
    public let object: AnyObject?
    /// Details of the notification, keyed by string; nil when there are none.
    public let userInfo: [String: any Sendable]?

    /// Creates a notification, like `Notification(name:object:userInfo:)`.
    public init(name: Name, object: AnyObject? = nil, userInfo: [String: any Sendable]? = nil) {
        self.name = name
        self.object = object
        self.userInfo = userInfo
    }
}
