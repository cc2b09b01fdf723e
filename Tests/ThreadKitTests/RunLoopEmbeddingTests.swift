// RunLoopEmbeddingTests: what a host event loop relies on (TKRunLoop+Embedding, docs/GLib.md): the
// poll descriptor turns readable for work from other threads and when the deadline comes, a pass
// without sleeping runs the work and leaves the descriptor unreadable (a level-triggered host must
// not spin), the deadline says "now" for work queued on the loop's own thread, and what the deadline's
// brief watch takes from the epoll set is delivered by the next pass. Each test runs on a
// fresh TKThread (its own loop), records what it saw, and is judged here after the thread ends;
// readability is judged by poll(2), independently of the loop.
import Glibc
import ThreadKit
import XCTest

final class RunLoopEmbeddingTests: XCTestCase {
    static let mode: TKRunLoop.Mode = "embedding"

    /// Whether `fd` polls readable within `milliseconds` (0: right now).
    static func readable(_ fd: Int32, within milliseconds: Int32 = 0) -> Bool {
        var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&probe, 1, milliseconds) == 1
    }

    /// Runs `body` on a new thread with its own run loop and waits for it.
    static func onLoopThread(_ body: @escaping @Sendable (TKRunLoop) -> Void) {
        let thread = TKThread(name: "embedding") { body(TKRunLoop.current) }
        thread.isDetached = false
        thread.start()
        thread.join()
    }

    /// Runs `body` on another thread and waits for it.
    static func fromAnotherThread(_ body: @escaping @Sendable () -> Void) {
        let thread = TKThread(name: "poster", block: body)
        thread.isDetached = false
        thread.start()
        thread.join()
    }

    func testWorkFromAnotherThreadMakesTheDescriptorReadableAndOnePassDrainsIt() {
        let seen = Guarded<[String: Bool]>([:])
        let ran = Guarded<[String]>([])
        Self.onLoopThread { loop in
            let source = TKRunLoopSource { ran.withLock { $0.append("source") } }
            loop.add(source, forMode: Self.mode)
            loop.runOnce(mode: Self.mode)
            let fd = loop.pollDescriptor
            seen.withLock { $0["idle-before"] = Self.readable(fd) }
            Self.fromAnotherThread {
                loop.perform(inModes: [Self.mode]) { ran.withLock { $0.append("perform") } }
            }
            seen.withLock { $0["after-perform"] = Self.readable(fd, within: 10_000) }
            loop.runOnce(mode: Self.mode)
            seen.withLock { $0["after-pass-1"] = Self.readable(fd) }
            Self.fromAnotherThread {
                source.signal()
                loop.wakeUp()
            }
            seen.withLock { $0["after-signal"] = Self.readable(fd, within: 10_000) }
            loop.runOnce(mode: Self.mode)
            seen.withLock { $0["after-pass-2"] = Self.readable(fd) }
            source.invalidate()
        }
        XCTAssertEqual(ran.withLock { $0 }, ["perform", "source"])
        let s = seen.withLock { $0 }
        XCTAssertEqual(s["idle-before"], false, "readable with nothing to do")
        XCTAssertEqual(s["after-perform"], true, "a perform from another thread left the descriptor unreadable")
        XCTAssertEqual(s["after-signal"], true, "signal + wakeUp from another thread left the descriptor unreadable")
        XCTAssertEqual(s["after-pass-1"], false, "a pass left the descriptor readable: a host polling it would spin")
        XCTAssertEqual(s["after-pass-2"], false, "a pass left the descriptor readable: a host polling it would spin")
    }

    func testTheDeadlineIsTheTimersAndTheDescriptorTurnsReadableThenNeverEarly() {
        let observed = Guarded<
            (
                deadline: ContinuousClock.Instant?, due: ContinuousClock.Instant, readableAt: ContinuousClock.Instant?,
                fires: Int, drained: Bool, after: ContinuousClock.Instant?
            )?
        >(nil)
        Self.onLoopThread { loop in
            let fires = Guarded(0)
            let due = ContinuousClock.now + .milliseconds(30)
            loop.add(TKTimer(fireAt: due, interval: .zero, repeats: false) { _ in fires.withLock { $0 += 1 } }, forMode: Self.mode)
            let deadline = loop.nextWakeDeadline(forMode: Self.mode)
            let readable = Self.readable(loop.pollDescriptor, within: 10_000)
            let readableAt: ContinuousClock.Instant? = readable ? .now : nil
            loop.runOnce(mode: Self.mode)
            let drained = !Self.readable(loop.pollDescriptor)
            observed.withLock {
                $0 = (deadline, due, readableAt, fires.withLock { $0 }, drained, loop.nextWakeDeadline(forMode: Self.mode))
            }
        }
        let o = observed.withLock { $0 }!
        XCTAssertEqual(o.deadline, o.due, "the deadline is the timer's fire date (tolerance 0)")
        XCTAssertNotNil(o.readableAt, "the descriptor did not turn readable when the timer came due")
        if let at = o.readableAt { XCTAssertGreaterThanOrEqual(at, o.due, "readable before the timer was due") }
        XCTAssertEqual(o.fires, 1)
        XCTAssertTrue(o.drained, "the timer's expiry left the descriptor readable")
        XCTAssertNil(o.after, "a one-shot timer that fired still gives a deadline")
    }

    func testWorkQueuedOnTheLoopsOwnThreadMakesTheDeadlineNow() {
        let observed = Guarded<(Bool, Bool, Int)?>(nil)
        Self.onLoopThread { loop in
            let ran = Guarded(0)
            loop.add(TKRunLoopSource {}, forMode: Self.mode)
            loop.runOnce(mode: Self.mode)
            let idle = loop.nextWakeDeadline(forMode: Self.mode) == nil
            // The loop's own thread writes no wake-up (CFRunLoop's rule): the deadline must say so.
            loop.perform(inModes: [Self.mode]) { ran.withLock { $0 += 1 } }
            let now = loop.nextWakeDeadline(forMode: Self.mode).map { $0 <= .now } ?? false
            loop.runOnce(mode: Self.mode)
            observed.withLock { $0 = (idle, now, ran.withLock { $0 }) }
        }
        let (idle, now, ran) = observed.withLock { $0 }!
        XCTAssertTrue(idle, "a deadline with nothing scheduled")
        XCTAssertTrue(now, "a block queued on the loop's thread did not make the deadline now")
        XCTAssertEqual(ran, 1)
    }

    /// After a pass woken by a descriptor, the host's next question watches the loop's epoll set
    /// briefly (where more than one CPU may be used) and takes what it finds, as the loop's own
    /// sleep does: having answered "now", it keeps answering "now" until a pass hands the
    /// descriptor to its owner; where it does not watch, the descriptor says so. Nothing is lost.
    func testWhatTheHostsWaitForWorkFindsIsDeliveredByTheNextPass() {
        let observed = Guarded<(firstNow: Bool, readable: Bool, secondNow: Bool, calls: Int, laterNow: Bool)?>(nil)
        let (r, w) = IOTestFD.pipe()
        defer {
            close(r)
            close(w)
        }
        Self.onLoopThread { loop in
            let calls = Guarded(0)
            let source = TKFileDescriptorSource(fileDescriptor: r) { source, _ in
                var byte: UInt8 = 0
                _ = read(r, &byte, 1)
                calls.withLock { $0 += 1 }
                source.enableCallBacks(.read)
            }
            loop.add(source, forMode: Self.mode)
            source.enableCallBacks(.read)
            var byte: UInt8 = 1
            _ = write(w, &byte, 1)
            loop.runOnce(mode: Self.mode) // woken by the descriptor: the next question watches
            _ = write(w, &byte, 1)
            let isNow = { (deadline: ContinuousClock.Instant?) in deadline.map { $0 <= .now } ?? false }
            let firstNow = isNow(loop.nextWakeDeadline(forMode: Self.mode))
            let readable = Self.readable(loop.pollDescriptor)
            let secondNow = isNow(loop.nextWakeDeadline(forMode: Self.mode))
            loop.runOnce(mode: Self.mode)
            let laterNow = isNow(loop.nextWakeDeadline(forMode: Self.mode))
            observed.withLock { $0 = (firstNow, readable, secondNow, calls.withLock { $0 }, laterNow) }
            source.invalidate()
        }
        let o = observed.withLock { $0 }!
        XCTAssertTrue(o.firstNow || o.readable, "the host was told neither by the deadline nor by the descriptor")
        XCTAssertTrue(!o.firstNow || o.secondNow, "\"now\" was answered, then withdrawn before any pass ran")
        XCTAssertEqual(o.calls, 2, "the second byte's readiness was not delivered by the pass")
        XCTAssertFalse(o.laterNow, "still \"now\" after the pass delivered everything")
    }

    func testAPassOfAnEmptyModeStillDrainsAWakeUp() {
        let observed = Guarded<(Bool, TKRunLoop.RunResult, Bool)?>(nil)
        Self.onLoopThread { loop in
            Self.fromAnotherThread { loop.wakeUp() }
            let readable = Self.readable(loop.pollDescriptor, within: 10_000)
            let result = loop.runOnce(mode: Self.mode)
            observed.withLock { $0 = (readable, result, Self.readable(loop.pollDescriptor)) }
        }
        let (readable, result, after) = observed.withLock { $0 }!
        XCTAssertTrue(readable)
        XCTAssertEqual(result, .finished)
        XCTAssertFalse(after, "runOnce of an empty mode left the wake-up readable: a host polling it would spin")
    }

    func testRunOnceDoesNotSleepUntilTheNextTimer() {
        let observed = Guarded<(TKRunLoop.RunResult, Int)?>(nil)
        Self.onLoopThread { loop in
            let fires = Guarded(0)
            let timer = TKTimer(fireAt: .now + .seconds(3600), interval: .zero, repeats: false) { _ in fires.withLock { $0 += 1 } }
            loop.add(timer, forMode: Self.mode)
            let result = loop.runOnce(mode: Self.mode)
            observed.withLock { $0 = (result, fires.withLock { $0 }) }
            timer.invalidate()
        }
        let (result, fires) = observed.withLock { $0 }!
        XCTAssertEqual(result, .timedOut)
        XCTAssertEqual(fires, 0)
    }
}
