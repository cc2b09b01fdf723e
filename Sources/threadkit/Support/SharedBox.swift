// SharedBox: a mutable value shared between the tour's threads. It does no locking of its own:
// every use states which lock guards it, or that one thread owns it until it is joined.
final class SharedBox<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// A token object for synchronized(_:), named for the narration.
final class Token: Sendable {
    let name: String
    init(name: String) { self.name = name }
}
