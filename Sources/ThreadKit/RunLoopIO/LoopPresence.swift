// LoopPresence: how a run-loop I/O object (descriptor source, listener, stream) lives in run
// loops: a version-0 TKRunLoopSource that calls the object back on a loop thread in the modes it
// was scheduled in, and a count of those modes per loop, so the object registers its descriptor
// in a loop's epoll set when it joins the loop's first mode and cancels it when it leaves the last
// (docs/RunLoopIO.md).
//
// Retention (CoreFoundation's): the source's perform closure holds the object strongly; the loop
// holds the source while it is in some mode; the presence holds the source weakly. So a loop keeps
// a scheduled object alive, and an object in no mode is kept by its users only.
//
// Threads: any. `state` is a leaf-ish lock: never held while calling TKRunLoop.add/remove (whose
// schedule callbacks come back here) or an owner's hooks.
import Synchronization

/// An object that lives in run loops through a LoopPresence.
protocol LoopPresenceOwner: AnyObject, Sendable {
    /// Joined the first mode of `loop` (register descriptors there). Any thread.
    func joined(_ loop: TKRunLoop)
    /// Left the last mode of `loop` (cancel its registrations). Any thread.
    func left(_ loop: TKRunLoop)
    /// The source was signalled: deliver what is pending. On a loop thread, in a scheduled mode.
    func perform()
}

// safety: its only field is a `Protected`.
final class LoopPresence: @unchecked Sendable {
    private struct Member {
        weak var loop: TKRunLoop?
        var modes: [TKRunLoop.Mode]
    }

    private struct State {
        weak var source: TKRunLoopSource?
        var members: [ObjectIdentifier: Member] = [:]
        var invalidated = false
    }

    private let state = Protected(State())

    /// Adds the object to `mode` of `loop` (creating its source if it is in no loop now).
    func add<Owner: LoopPresenceOwner>(_ owner: Owner, to loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        let source: TKRunLoopSource? = state.withLock { s in
            guard !s.invalidated else { return nil }
            if let existing = s.source, existing.isValid { return existing }
            let created = TKRunLoopSource(
                schedule: { [weak self, weak owner] loop, mode in
                    if let self, let owner { self.joined(owner, loop, mode) }
                },
                cancel: { [weak self, weak owner] loop, mode in
                    if let self, let owner { self.left(owner, loop, mode) }
                },
                perform: { owner.perform() })
            s.source = created
            return created
        }
        if let source { loop.add(source, forMode: mode) }
    }

    func remove(from loop: TKRunLoop, forMode mode: TKRunLoop.Mode) {
        if let source = state.withLock({ $0.source }) { loop.remove(source, forMode: mode) }
    }

    /// Leaves every loop for good (the cancel callbacks tell the owner).
    func invalidate() {
        let source = state.withLock { s -> TKRunLoopSource? in
            s.invalidated = true
            return s.source
        }
        source?.invalidate()
    }

    /// Marks the source ready and wakes the loops holding it (not the calling thread's own loop,
    /// which is awake: it is running this code or will look at its sources before sleeping).
    func signal() {
        let (source, loops) = state.withLock { s in (s.source, s.members.values.compactMap { $0.loop }) }
        guard let source else { return }
        source.signal()
        let me = SystemCall.currentThreadID
        for loop in loops where loop.ownerThread != me { loop.wakeUp() }
    }

    /// The loops the object is in now.
    var loops: [TKRunLoop] { state.withLock { s in s.members.values.compactMap { $0.loop } } }

    /// The modes of `loop` the object is in.
    func modes(of loop: TKRunLoop) -> [TKRunLoop.Mode] {
        state.withLock { $0.members[ObjectIdentifier(loop)]?.modes ?? [] }
    }

    var isScheduled: Bool { state.withLock { s in s.members.values.contains { $0.loop != nil } } }

    private func joined(_ owner: some LoopPresenceOwner, _ loop: TKRunLoop, _ mode: TKRunLoop.Mode) {
        let first = state.withLock { s -> Bool in
            let key = ObjectIdentifier(loop)
            if s.members[key]?.loop == nil { s.members[key] = Member(loop: loop, modes: []) }
            s.members[key]!.modes.append(mode)
            return s.members[key]!.modes.count == 1
        }
        if first { owner.joined(loop) }
    }

    private func left(_ owner: some LoopPresenceOwner, _ loop: TKRunLoop, _ mode: TKRunLoop.Mode) {
        let last = state.withLock { s -> Bool in
            let key = ObjectIdentifier(loop)
            guard var member = s.members[key] else { return false }
            if let index = member.modes.firstIndex(of: mode) { member.modes.remove(at: index) }
            if member.modes.isEmpty {
                s.members.removeValue(forKey: key)
                return true
            }
            s.members[key] = member
            return false
        }
        if last { owner.left(loop) }
    }
}
