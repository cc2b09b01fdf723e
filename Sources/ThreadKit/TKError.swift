// TKError: the one error type every throwing ThreadKit call uses (SPEC §1). Immutable values.

/// An error thrown by ThreadKit. `message` names the object that refused and how to fix the call.
public struct TKError: Error, Equatable, CustomStringConvertible {
    /// What kind of refusal the error is; `message` says the particulars.
    public enum Code: Sendable, Equatable {
        /// A value the call cannot accept: a bad stack size, an empty event mask, a lock path in
        /// a missing directory, a malformed URL. Nothing was changed.
        case invalidArgument
        /// The target thread has finished, so a perform request could not be delivered (it is
        /// refused instead of being dropped or waiting forever).
        case threadFinished
        /// A port that is not valid (invalidated) was used. Reserved by the contract: the calls
        /// that send today report an invalid port with their result (`send(before:)` returns false).
        case invalidPort
        /// Adding the dependency would make an operation depend on itself, directly or through others.
        case dependencyCycle
        /// The caller does not hold the lock it tried to release or use (a distributed lock not
        /// held by this object, or broken since it was taken).
        case notLockOwner
        /// A system call failed; `errno` holds its error number.
        case systemCall
        /// The peer broke the protocol: a malformed or unauthenticated frame from a socket port,
        /// or an answer from the PostgreSQL server that could not be understood.
        case protocolViolation
        /// Called after the moment it had to be called in (TKConcurrency.installGlobalExecutor).
        case tooLate
    }
    /// What kind of refusal this is.
    public let code: Code
    /// What was wrong and how to fix it.
    public let message: String
    /// The errno of a failed system call (`.systemCall`), else nil.
    public let errno: Int32?

    /// Creates an error of `code`; `message` should name the object that refused and the fix,
    /// and `errno` is the error number of a failed system call (for `.systemCall`).
    public init(_ code: Code, _ message: String, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
    }

    /// `TKError.<code>: <message>`, followed by the errno's number and name when there is one.
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
    // The flight recorder's last seconds (docs/DiagnosticsTrace.md §8): written by a helper
    // thread while this one waits, at most FlightRecorder.misuseTimeout.
    if DiagnosticsSwitch.isOn(.flightRecorder) { FlightRecorder.dumpBeforeMisuse(message) }
    fatalError("ThreadKit misuse: \(message)", file: file, line: line)
}

#if DEBUG
    /// Stops a debug build in which `function`, which runs only with `lock` held by the calling thread
    /// (the `…Locked` functions, the pool's scheduler), was reached without it. A ThreadKit bug, not a
    /// misuse: the fix is in the caller, the frame below `function` in the backtrace.
    func lockNotHeld(_ lock: StaticString, by function: StaticString, holder: String, file: StaticString, line: UInt) -> Never {
        fatalError(
            "ThreadKit lock not held: \(function) needs \(lock) held by the calling thread "
                + "(thread \(SystemCall.currentThreadID)), but \(holder). Fix: take \(lock) in the caller before "
                + "calling \(function), or call it only from code that already holds it.",
            file: file, line: line)
    }
#endif
