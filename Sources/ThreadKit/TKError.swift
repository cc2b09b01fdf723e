// TKError: the one error type every throwing ThreadKit call uses (SPEC §1). Immutable values.

/// An error thrown by ThreadKit. `message` names the object that refused and how to fix the call.
public struct TKError: Error, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        case invalidArgument, threadFinished, invalidPort, dependencyCycle, notLockOwner, systemCall, protocolViolation
        /// Called after the moment it had to be called in (TKConcurrency.installGlobalExecutor).
        case tooLate
    }
    public let code: Code
    /// What was wrong and how to fix it.
    public let message: String
    /// The errno of a failed system call (`.systemCall`), else nil.
    public let errno: Int32?

    public init(_ code: Code, _ message: String, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
    }

    public var description: String {
        if let errno { return "TKError.\(code): \(message) (errno \(errno): \(SystemCall.errorName(errno)))" }
        return "TKError.\(code): \(message)"
    }

    /// A failed system call, with errno captured by the caller right after the call.
    static func systemCall(_ call: String, errno: Int32, _ context: String) -> TKError {
        TKError(.systemCall, "\(call) failed for \(context)", errno: errno)
    }
}

/// Stops the process after a misuse that cannot continue (SPEC, general rules). `fatalError`,
/// unlike `precondition`, keeps its message in -O builds. The message must name the object, the
/// call and the fix.
func misuse(_ message: String, file: StaticString = #file, line: UInt = #line) -> Never {
    fatalError("ThreadKit misuse: \(message)", file: file, line: line)
}
