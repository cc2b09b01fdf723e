// TKNotification: what a notification center delivers (NSNotification). Immutable values.

/// A notification: a name, an optional sender and optional user info.
public struct TKNotification: @unchecked Sendable {
    /// A notification name.
    public struct Name: Hashable, Sendable, RawRepresentable, ExpressibleByStringLiteral, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { rawValue = value }
        public var description: String { rawValue }
    }

    public let name: Name
    /// The sender. Compared by identity when matching observers.
    public let object: AnyObject?
    public let userInfo: [String: any Sendable]?

    public init(name: Name, object: AnyObject? = nil, userInfo: [String: any Sendable]? = nil) {
        self.name = name
        self.object = object
        self.userInfo = userInfo
    }
}
