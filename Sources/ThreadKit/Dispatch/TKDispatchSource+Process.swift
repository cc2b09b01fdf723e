// TKDispatchSource+Process: process sources (DispatchSource.makeProcessSource): `.exit` through a
// pidfd (pidfd_open, readable once the process has exited, watched one-shot by the manager's
// epoll); `.signal` for the calling process only. The pidfd is opened when the source is made and
// closed when it is cancelled or freed (state.ownedFDs, guarded by the source's lock).
import CThreadKit
import Glibc

extension TKDispatchSource {
    /// Process events (DispatchSource.ProcessEvent, kqueue's NOTE_* values). `data` of a process
    /// source is the union of the events seen since the last handler run:
    /// `ProcessEvent(rawValue: source.data)`.
    public struct ProcessEvent: OptionSet, Sendable, Hashable {
        /// The bits of the set: kqueue's `NOTE_EXIT` (0x8000_0000) and `NOTE_SIGNAL` (0x0800_0000).
        public let rawValue: UInt
        /// Creates the set whose bits are `rawValue`, such as a source's `data`.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The process exited (or was gone already when the source was made, as libdispatch reports).
        public static let exit = ProcessEvent(rawValue: 0x8000_0000)
        /// The process received a signal. Linux reports no signal deliveries to another process
        /// (kqueue's NOTE_SIGNAL has no counterpart short of ptrace), so only a source on the
        /// calling process may ask for it; it fires when a signal that a ThreadKit signal source
        /// catches is delivered to the process.
        public static let signal = ProcessEvent(rawValue: 0x0800_0000)
        /// Both events (on Linux there are no fork or exec events).
        public static let all: ProcessEvent = [.exit, .signal]
    }

    /// A source for events of process `identifier` (`.exit`, `.signal`), delivered on `queue`.
    /// Throws `TKError` (`.invalidArgument`) for an empty mask, or `.signal` asked of a process
    /// other than the caller; (`.systemCall`) if the kernel has no pidfd_open (before 5.3) or
    /// the process has no descriptors left. A process that no longer exists is not an error: the
    /// source reports `.exit` once activated, as libdispatch does.
    public static func makeProcessSource(identifier: Int32, eventMask: ProcessEvent, queue: TKDispatchQueue) throws -> TKDispatchSource {
        let call = "TKDispatchSource.makeProcessSource(identifier: \(identifier), eventMask: 0x\(String(eventMask.rawValue, radix: 16)))"
        guard !eventMask.isEmpty, eventMask.isSubset(of: .all) else {
            throw TKError(
                .invalidArgument,
                "\(call): the mask must hold .exit and/or .signal (fork and exec events "
                    + "do not exist on Linux). Fix: pass [.exit], [.signal] or .all.")
        }
        guard identifier > 0 else {
            throw TKError(.invalidArgument, "\(call): \(identifier) is not a process id. Fix: pass the pid of a process.")
        }
        if eventMask.contains(.signal) && identifier != getpid() {
            throw TKError(
                .invalidArgument,
                "\(call): Linux reports no signal deliveries to another process (kqueue's "
                    + "NOTE_SIGNAL has no counterpart), so .signal can be watched only for the calling process "
                    + "(\(getpid())). Fix: watch .exit, or have that process report its signals itself.")
        }
        let source = TKDispatchSource(kind: .process(identifier), queue: queue, eventMask: eventMask.rawValue)
        if eventMask.contains(.exit) {
            let pidfd = tk_pidfd_open(identifier)
            if pidfd >= 0 {
                source.state.ownedFDs = [pidfd]
            } else if errno == ESRCH {
                source.state.exitedBeforeWatch = true
            } else {
                throw TKError.systemCall("pidfd_open", errno: errno, "\(call) (Linux 5.3 or later is needed to watch a process's exit)")
            }
        }
        return source
    }

    /// Caller holds lock (activation).
    func registerProcessLocked() -> AfterRegistering {
        lock.assertHeld("TKDispatchSource.lock")
        let mask = ProcessEvent(rawValue: eventMask)
        if mask.contains(.signal) { DispatchManager.shared.watchOwnSignals(self) }
        if state.exitedBeforeWatch { return .merge(ProcessEvent.exit.rawValue) }
        for fd in state.ownedFDs {
            let error = DispatchManager.shared.watchOwned(fd, events: EventPoll.pollIn | EventPoll.pollOneShot, source: self)
            if error != 0 { return .refused(error) }
        }
        return .nothing
    }

    /// The pidfd became readable: the process exited. Watched one-shot, so this comes once.
    func processExited() {
        merge(ProcessEvent.exit.rawValue)
    }
}
