// TKFileDescriptorSource: CFFileDescriptor. Read/write readiness callbacks for one descriptor,
// on the thread of a run loop it was added to, in the modes it was added to, one shot at a time
// (docs/RunLoopIO.md).
//
// Threads: `enableCallBacks`, `disableCallBacks`, `invalidate` and scheduling from any thread;
// the callback runs on a loop thread with no lock held. `state` guards everything mutable,
// including the registrations' arming; it is taken before EventPoll's table lock and never held
// while calling TKRunLoop.add/remove or the callback.
import Glibc
import Synchronization

// safety: the mutable state is a `Protected`; the rest is immutable.
/// Watches a file descriptor for read and write readiness on run loops (CFFileDescriptor).
public final class TKFileDescriptorSource: @unchecked Sendable {
    /// The kinds of readiness a callback reports (kCFFileDescriptorReadCallBack / WriteCallBack).
    public struct CallBackTypes: OptionSet, Sendable {
        /// The types' bits: kCFFileDescriptorReadCallBack (1) and kCFFileDescriptorWriteCallBack (2).
        public let rawValue: UInt8
        /// The set with the bits of `rawValue` (1: `read`, 2: `write`).
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The descriptor is readable: data, the end of the input, a connection waiting on a
        /// listening socket, or an error (kCFFileDescriptorReadCallBack). An error or hang-up
        /// reports both types, if both are enabled.
        public static let read = CallBackTypes(rawValue: 1)
        /// The descriptor is writable: room in its buffer, a finished non-blocking connect, or an
        /// error (kCFFileDescriptorWriteCallBack).
        public static let write = CallBackTypes(rawValue: 2)
    }

    private enum Lifecycle {
        case valid
        /// Epoll refused the descriptor as closed: report it once, then become invalid without
        /// closing (the number may already belong to someone else).
        case lost
        case invalid
    }

    private struct State {
        var lifecycle = Lifecycle.valid
        /// Types armed by `enableCallBacks` and not yet reported.
        var enabled: CallBackTypes = []
        /// Types reported by the kernel and not yet delivered to the callback.
        var fired: CallBackTypes = []
        /// A regular file (epoll refuses it with EPERM): always ready, as poll(2) says.
        var alwaysReady = false
        /// One registration per loop the source is in.
        var registrations: [ObjectIdentifier: DescriptorRegistration] = [:]
    }

    /// The descriptor watched, as given at creation (CFFileDescriptorGetNativeDescriptor). The
    /// source closes it only when made with `closeOnInvalidate`; otherwise the caller owns it and
    /// must invalidate the source before closing it.
    public let fileDescriptor: Int32
    private let closeOnInvalidate: Bool
    private let callback: @Sendable (TKFileDescriptorSource, CallBackTypes) -> Void
    private let state = Protected(State())
    private let presence = LoopPresence()

    /// Watches `fileDescriptor`; with `closeOnInvalidate`, `invalidate()` (or the source's end)
    /// closes it. Nothing is reported until `enableCallBacks` and until the source is in a loop.
    public init(
        fileDescriptor: Int32, closeOnInvalidate: Bool = false,
        callback: @escaping @Sendable (TKFileDescriptorSource, CallBackTypes) -> Void
    ) {
        self.fileDescriptor = fileDescriptor
        self.closeOnInvalidate = closeOnInvalidate
        self.callback = callback
    }

    deinit {
        // Reached only when no loop holds the source: its registrations are cancelled already or
        // belong to loops that are gone.
        let lifecycle = state.withLock { s -> Lifecycle in
            for registration in s.registrations.values { registration.cancel() }
            return s.lifecycle
        }
        if lifecycle == .valid && closeOnInvalidate { close(fileDescriptor) }
    }

    /// Arms `types`: each is reported once, when the descriptor is ready for it, then disabled
    /// until enabled again. A descriptor found closed is reported with `[.read, .write]` and the
    /// source becomes invalid. A descriptor closed under the source whose number another object
    /// on the same loop has watched since is a misuse that stops the process (the source would
    /// take that object's events); `invalidate()` on such a source stays safe and touches
    /// nothing of the new owner's.
    public func enableCallBacks(_ types: CallBackTypes) {
        let signal = state.withLock { s -> Bool in
            guard s.lifecycle == .valid else { return false }
            s.enabled.formUnion(types)
            // Forced: a registration the kernel dropped because the descriptor was closed looks
            // armed to us; only epoll_ctl can tell.
            return armAll(&s, force: true)
        }
        if signal { presence.signal() }
    }

    /// Takes back types armed by `enableCallBacks` (and not yet delivered).
    public func disableCallBacks(_ types: CallBackTypes) {
        state.withLock { s in
            s.enabled.subtract(types)
            s.fired.subtract(types)
            // An armed registration may report once more; `descriptorReady` ignores it.
        }
    }

    /// Removes the source from every loop and stops it for good; closes the descriptor if the
    /// source was made with `closeOnInvalidate` (and the descriptor was not found closed already).
    public func invalidate() {
        let closeIt = state.withLock { s -> Bool in
            let wasValid = s.lifecycle == .valid
            guard s.lifecycle != .invalid else { return false }
            s.lifecycle = .invalid
            s.enabled = []
            s.fired = []
            for registration in s.registrations.values { registration.cancel() }
            s.registrations.removeAll()
            return wasValid && closeOnInvalidate
        }
        presence.invalidate()
        if closeIt { close(fileDescriptor) }
    }

    /// False once `invalidate()` was called, or once the descriptor was found closed (its one
    /// `[.read, .write]` report is still delivered), as CFFileDescriptorIsValid. An invalid source
    /// reports nothing more and adding it to a loop does nothing. Thread-safe.
    public var isValid: Bool { state.withLock { $0.lifecycle == .valid } }

    // MARK: Loops

    func add(to loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        guard isValid else { return }
        presence.add(self, to: loop, forMode: mode)
    }

    func remove(from loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        presence.remove(from: loop, forMode: mode)
    }

    /// Arms every registration for the enabled types. True if something must be delivered now
    /// (an always-ready file, or a descriptor found closed). Caller holds `state`.
    private func armAll(_ s: inout State, force: Bool = false) -> Bool {
        if s.alwaysReady {
            s.fired.formUnion(s.enabled)
            s.enabled = []
            return !s.fired.isEmpty
        }
        let interest = Self.interest(s.enabled)
        for registration in s.registrations.values {
            switch registration.arm(interest, force: force) {
            case 0: continue
            case EPERM:
                s.alwaysReady = true
                for registration in s.registrations.values { registration.cancel() }
                return armAll(&s)
            case EEXIST:
                misuse(
                    "TKFileDescriptorSource(fileDescriptor: \(fileDescriptor)) added to the run loop of "
                        + "\(registration.loopDescription), whose epoll set already watches descriptor \(fileDescriptor) "
                        + "(another source, stream or port on it, or one opened on that number after this source's "
                        + "descriptor was closed). Fix: use one TKFileDescriptorSource per descriptor and enable both "
                        + "types on it; invalidate a source before closing its descriptor.")
            case EventPoll.superseded:
                // Closed under the source and the number reused by another object on that loop:
                // arming would take that object's events. Nothing was touched (EventPoll).
                misuse(
                    "TKFileDescriptorSource(fileDescriptor: \(fileDescriptor)).enableCallBacks: descriptor "
                        + "\(fileDescriptor) was closed while the source was still valid, and the number now belongs to "
                        + "another object on the run loop of \(registration.loopDescription) (a source, stream, socket or "
                        + "port opened since); watching it would take that object's events. Fix: invalidate the source "
                        + "before closing its descriptor (or create it with closeOnInvalidate: true and call invalidate()).")
            default:
                // EBADF, ENOENT: closed under the source (perhaps reused since). Report once.
                s.lifecycle = .lost
                s.fired = [.read, .write]
                s.enabled = []
                for registration in s.registrations.values { registration.cancel() }
                return true
            }
        }
        return false
    }

    private static func interest(_ types: CallBackTypes) -> UInt32 {
        (types.contains(.read) ? EpollBits.readInterest : 0) | (types.contains(.write) ? EpollBits.writeInterest : 0)
    }
}

extension TKFileDescriptorSource: LoopPresenceOwner, ReadinessHandler {
    func joined(_ loop: TKRunLoop) {
        let signal = state.withLock { s -> Bool in
            guard s.lifecycle == .valid else { return false }
            s.registrations[ObjectIdentifier(loop)] = DescriptorRegistration(fd: fileDescriptor, loop: loop, handler: self)
            return armAll(&s)
        }
        if signal { presence.signal() }
    }

    func left(_ loop: TKRunLoop) {
        state.withLock { s in s.registrations.removeValue(forKey: ObjectIdentifier(loop))?.cancel() }
    }

    func descriptorReady(_ registration: DescriptorRegistration, events: UInt32) {
        let signal = state.withLock { s -> Bool in
            registration.disarmed()
            guard s.lifecycle == .valid else { return false }
            var ready: CallBackTypes = []
            if events & (EpollBits.readInterest | EpollBits.failure) != 0 { ready.insert(.read) }
            if events & (EpollBits.writeInterest | EpollBits.failure) != 0 { ready.insert(.write) }
            let fire = ready.intersection(s.enabled)
            s.enabled.subtract(fire)
            s.fired.formUnion(fire)
            // Whatever stays enabled is armed again (here or in other loops it is already).
            if !s.enabled.isEmpty { _ = armAll(&s) }
            return !s.fired.isEmpty
        }
        if signal { presence.signal() }
    }

    func perform() {
        let (types, lost) = state.withLock { s -> (CallBackTypes, Bool) in
            defer { s.fired = [] }
            if s.lifecycle == .lost {
                s.lifecycle = .invalid
                return (s.fired, true)
            }
            return s.lifecycle == .valid ? (s.fired, false) : ([], false)
        }
        if lost { presence.invalidate() }
        if !types.isEmpty { callback(self, types) }
    }
}

extension TKRunLoop {
    /// Adds a descriptor source to `mode` (`.common`: the common modes). Its callback then runs on
    /// this loop's thread while the loop runs one of the modes it was added to.
    public func add(_ source: TKFileDescriptorSource, forMode mode: Mode) {
        source.add(to: self, forMode: mode)
    }

    /// Stops the source's callbacks on this loop in `mode` (`.common`: every common mode), like
    /// removing its CFFileDescriptor run-loop source. Once it is in no mode of this loop, the loop
    /// stops watching the descriptor and lets go of the source. Enabled types stay enabled and
    /// are reported once it is added again. Thread-safe; a mode it is not in is left alone.
    public func remove(_ source: TKFileDescriptorSource, forMode mode: Mode) {
        source.remove(from: self, forMode: mode)
    }
}
