// SharedBox: a mutable value shared between the tour's threads. It does no locking of its own:
// every use states which lock guards it, or that one thread owns it until it is joined.
// safety: no locking of its own by design: each use is under the lock it names, or on the one
// thread that owns the box until it is joined (test and tour code only).
package final class SharedBox<Value>: @unchecked Sendable {
    package var value: Value
    package init(_ value: Value) { self.value = value }
}

/// A token object for synchronized(_:), named for the narration.
package final class Token: Sendable {
    package let name: String
    package init(name: String) { self.name = name }
}
