import Foundation
import Synchronization
import Testing
import XCTest

// Perform requests (SPEC §3): to another thread in arrival order, waiting and not, modes, the
// target thread itself, finished threads, a thread finishing with waiting senders, the main
// thread, background threads, and delayed requests with cancellation.
@testable import ThreadKit

final class PerformRequestTests: XCTestCase {
    func testRequestsRunOnTheTargetThreadInArrivalOrder() throws {
        let worker = LoopThread()
        defer { worker.finish() }
        let order = Shared<[Int]>([]) // target thread only until the waiting request returns
        let onTarget = Atomic<Bool>(true)
        let tid = worker.thread.attributes.current.tid
        for i in 0..<100 {
            try worker.thread.perform {
                if UInt32(KernelThread.currentID()) != tid { onTarget.store(false, ordering: .relaxed) }
                order.value.append(i)
            }
        }
        try worker.thread.perform(waitUntilDone: true) {}
        XCTAssertEqual(order.value, Array(0..<100))
        XCTAssertTrue(onTarget.load(ordering: .relaxed))
    }

    func testARequestSentRightAfterStartIsQueuedNotRefused() throws {
        // Between start() and the thread's first instruction the thread has no run loop yet; the
        // request waits for it instead of being refused (Foundation queues it too).
        for _ in 0..<stress(200) {
            let ran = DispatchSemaphore(value: 0)
            let done = Flag()
            let thread = TKThread {
                let loop = TKRunLoop.current
                loop.add(TKRunLoopSource {}, forMode: .default)
                while !done.isSet { loop.run(mode: .default, before: .now + .seconds(30)) }
            }
            thread.start()
            try thread.perform(modes: [.default]) {
                done.set()
                TKRunLoop.current.stop()
                ran.signal()
            }
            XCTAssertEqual(ran.wait(timeout: .now() + 30), .success)
            XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        }
    }

    func testARequestMakesRunModeBeforeReturnButAPlainBlockDoesNot() throws {
        // Seed 004's resident thread: `while (shouldKeepRunning && [loop runMode:beforeDate:])`
        // comes round once per performSelector:onThread: (a version-0 source in Cocoa), so the
        // flag is seen without waiting for the date. A CFRunLoopPerformBlock block is not a
        // source: the run goes on after it.
        let returns = Atomic<Int>(0)
        let keepRunning = Atomic<Bool>(true)
        let thread = TKThread {
            let loop = TKRunLoop.current
            loop.add(TKRunLoopSource {}, forMode: .default)
            while keepRunning.load(ordering: .acquiring) && loop.run(mode: .default, before: .now + .seconds(600)) {
                returns.add(1, ordering: .releasing)
            }
        }
        thread.start()
        let blockRan = DispatchSemaphore(value: 0)
        try thread.perform(waitUntilDone: true) {} // the loop runs; this request made it return once
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { returns.load(ordering: .acquiring) == 1 })
        TKRunLoop.loop(of: thread)!.perform { blockRan.signal() }
        XCTAssertEqual(blockRan.wait(timeout: .now() + 30), .success)
        try thread.perform(waitUntilDone: true) {}
        // The plain block ran in the same run as the next request or in the run before it, which
        // did not return: either way, one more return only.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { returns.load(ordering: .acquiring) == 2 })
        XCTAssertEqual(returns.load(ordering: .acquiring), 2)
        keepRunning.store(false, ordering: .releasing)
        try thread.perform {} // the run in progress returns; the flag ends the loop
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertEqual(returns.load(ordering: .acquiring), 3)
    }

    func testTenThousandWaitingRoundTrips() throws {
        let worker = LoopThread()
        defer { worker.finish() }
        let count = Shared(0) // target thread only; read after each wait
        for i in 1...stress(10_000) {
            try worker.thread.perform(waitUntilDone: true) { count.value += 1 }
            XCTAssertEqual(count.value, i)
            if count.value != i { break }
        }
    }

    func testWaitingOnTheTargetThreadItselfRunsAtOnce() throws {
        let ran = Shared(false)
        try TKThread.current.perform(waitUntilDone: true) { ran.value = true }
        XCTAssertTrue(ran.value, "ran synchronously, before perform returned")
    }

    func testRequestsWaitForTheirMode() throws {
        let worker = LoopThread()
        defer { worker.finish() }
        let ran = Atomic<Bool>(false)
        try worker.thread.perform(modes: ["elsewhere"]) { ran.store(true, ordering: .relaxed) }
        try worker.thread.perform(waitUntilDone: true, modes: [.default]) {}
        XCTAssertFalse(ran.load(ordering: .relaxed), "ran in a mode it was not sent for")
    }

    func testRequestsInNoModesAreRefused() throws {
        let worker = LoopThread()
        defer { worker.finish() }
        let ran = Atomic<Bool>(false)
        XCTAssertThrowsError(try worker.thread.perform(modes: []) { ran.store(true, ordering: .relaxed) }) { error in
            XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try worker.thread.perform(waitUntilDone: true, modes: []) { ran.store(true, ordering: .relaxed) })
        try worker.thread.perform(waitUntilDone: true, modes: [.default]) {}
        XCTAssertFalse(ran.load(ordering: .relaxed))
    }

    func testARequestToAFinishedThreadThrows() {
        let t = TKThread {}
        t.start()
        t.join()
        XCTAssertThrowsError(try t.perform {}) { XCTAssertEqual(($0 as? TKError)?.code, .threadFinished) }
        XCTAssertThrowsError(try TKThread {}.perform {}) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
    }

    func testAThreadThatFinishesFailsItsWaitingSenders() {
        // The target never runs its loop and finishes once the request is queued.
        let queued = DispatchSemaphore(value: 0)
        let target = TKThread { queued.wait() }
        target.start()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { target.isExecuting })
        let outcome = Shared<TKError?>(nil)
        let sender = Workers.start {
            do { try target.perform(waitUntilDone: true) {} } catch { outcome.value = error as? TKError }
        }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) {
                TKRunLoop.loop(of: target)?.lock.withLock { !(TKRunLoop.loop(of: target)?.waitingRequests.isEmpty ?? true) } ?? false
            })
        queued.signal()
        XCTAssertEqual(sender.wait(timeout: .now() + 30), .success, "the sender was left blocked")
        XCTAssertEqual(outcome.value?.code, .threadFinished)
    }

    func testPerformOnMainThreadWaitsForTheMainLoop() {
        let ranOnMain = Atomic<Bool>(false)
        let done = Flag()
        let background = TKThread.performInBackground {
            TKThread.performOnMainThread(waitUntilDone: true) { ranOnMain.store(TKThread.isMainThread, ordering: .relaxed) }
            done.set()
        }
        XCTAssertFalse(background.isMainThread)
        let deadline = ContinuousClock.now + .seconds(30)
        while !done.isSet && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(10))
        }
        XCTAssertTrue(done.isSet)
        XCTAssertTrue(ranOnMain.load(ordering: .relaxed))
        XCTAssertTrue(background.join(until: .now + .seconds(30)))
    }

    func testDelayedRequestsNeverRunEarly() {
        let loop = TKRunLoop.current
        let start = ContinuousClock.now
        let ranAt = Shared<ContinuousClock.Instant?>(nil)
        loop.perform(afterDelay: .milliseconds(20), inModes: ["delayed"]) { ranAt.value = .now }
        loop.run(mode: "delayed", for: .seconds(30), returnAfterSourceHandled: false)
        XCTAssertGreaterThanOrEqual(ranAt.value!, start + .milliseconds(20))
    }

    func testCancellingByTargetAndKey() {
        final class Target {}
        let loop = TKRunLoop.current
        let a = Target()
        let b = Target()
        let ran = Shared<[String]>([])
        loop.perform(afterDelay: .milliseconds(5), inModes: ["cancel"], target: a, key: "x") { ran.value.append("a.x") }
        loop.perform(afterDelay: .milliseconds(5), inModes: ["cancel"], target: a, key: "y") { ran.value.append("a.y") }
        loop.perform(afterDelay: .milliseconds(5), inModes: ["cancel"], target: b) { ran.value.append("b") }
        TKRunLoop.cancelPreviousPerformRequests(withTarget: a, key: "x")
        loop.run(mode: "cancel", for: .seconds(30), returnAfterSourceHandled: false)
        XCTAssertEqual(Set(ran.value), ["a.y", "b"])
        ran.value = []
        loop.perform(afterDelay: .milliseconds(5), inModes: ["cancel"], target: a, key: "x") { ran.value.append("a.x") }
        loop.perform(afterDelay: .milliseconds(5), inModes: ["cancel"], target: a) { ran.value.append("a") }
        TKRunLoop.cancelPreviousPerformRequests(withTarget: a)
        XCTAssertEqual(loop.run(mode: "cancel", for: .milliseconds(30), returnAfterSourceHandled: false), .finished)
        XCTAssertEqual(ran.value, [])
    }
}

/// Misuses of perform requests, each an exit test (Support/MisuseAssertions.swift).
@Suite struct PerformRequestExitTests {
    @Test func performAfterDelayInNoModesIsRefused() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKRunLoop.current.perform(afterDelay: .milliseconds(1), inModes: []) {}
        }
        expectMisuse(result, mentions: ["perform(afterDelay:", "inModes: [])", "Fix:"])
    }
}
