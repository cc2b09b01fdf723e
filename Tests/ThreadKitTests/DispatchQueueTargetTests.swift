// Retargeting an inactive queue (`setTarget(queue:)`), queue context with a finalizer, and the
// `debugDescription`s of queues, groups and sources (issue 14, "Dispatch surface"). Judged by
// Foundation's semaphores, a pthread-mutex record of overlaps and order, and weak references;
// misuse (retargeting an active or global queue, a loop) in exit tests.
import Dispatch
import Foundation
import Synchronization
import Testing
import ThreadKit
import XCTest

final class DispatchQueueTargetTests: XCTestCase {
    func testARetargetedQueueRunsOnItsNewTargetOnceActivated() {
        let target = TKDispatchQueue(label: "gate")
        let key = TKDispatchSpecificKey<String>()
        target.setSpecific(key: key, value: "gate")
        let queue = TKDispatchQueue(label: "retargeted", attributes: .initiallyInactive)
        let seen = Guarded<[String?]>([])
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<3 {
            queue.async {
                seen.withLock { $0.append(TKDispatchQueue.getSpecific(key: key)) }
                done.signal()
            }
        }
        queue.setTarget(queue: target)
        target.suspend()
        queue.activate()
        // The target is suspended: nothing of the retargeted queue may run through it.
        XCTAssertEqual(done.wait(timeout: .now() + .milliseconds(50)), .timedOut, "ran without its (suspended) target")
        target.resume()
        for _ in 0..<3 { XCTAssertEqual(done.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(seen.withLock { $0 }, ["gate", "gate", "gate"], "the work did not run inside the new target")
    }

    func testTwoConcurrentQueuesRetargetedToOneSerialQueueNeverOverlap() {
        let serial = TKDispatchQueue(label: "bottleneck")
        let queues = (0..<2).map { TKDispatchQueue(label: "wide-\($0)", attributes: [.concurrent, .initiallyInactive]) }
        for q in queues {
            q.setTarget(queue: serial)
            q.activate()
        }
        let inside = Guarded(0)
        let overlaps = Guarded(0)
        let group = DispatchGroup()
        let n = stress(2_000)
        for i in 0..<n {
            group.enter()
            queues[i % 2].async {
                inside.withLock {
                    $0 += 1
                    if $0 != 1 { overlaps.withLock { $0 += 1 } }
                }
                inside.withLock { $0 -= 1 }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(overlaps.withLock { $0 }, 0)
    }

    func testRetargetingToNilMeansTheGlobalQueueOfTheQueuesQoS() {
        let first = TKDispatchQueue(label: "first")
        let queue = TKDispatchQueue(label: "back-to-global", qos: .utility, attributes: .initiallyInactive, target: first)
        queue.setTarget(queue: nil)
        XCTAssertTrue(
            queue.debugDescription.contains("target: \"\(TKDispatchQueue.global(qos: .utility).label)\""),
            queue.debugDescription)
        first.suspend() // if the queue still ran on `first`, this would hold its work back
        let ran = DispatchSemaphore(value: 0)
        queue.async { ran.signal() }
        queue.activate()
        XCTAssertEqual(ran.wait(timeout: .now() + 30), .success)
        first.resume()
    }

    // MARK: Context and finalizer

    func testTheFinalizerRunsOnceWithTheContextOnTheTargetAfterTheLastBlock() {
        let target = TKDispatchQueue(label: "finalizers")
        let key = TKDispatchSpecificKey<Int>()
        target.setSpecific(key: key, value: 7)
        let log = Guarded<[String]>([])
        let finalized = DispatchSemaphore(value: 0)
        weak var weakQueue: TKDispatchQueue?
        do {
            let queue = TKDispatchQueue(label: "with-context", target: target)
            weakQueue = queue
            queue.context = "the context"
            XCTAssertEqual(queue.context as? String, "the context")
            queue.setFinalizer { context in
                log.withLock { $0.append("finalizer(\(context)) on target \(TKDispatchQueue.getSpecific(key: key) ?? -1)") }
                finalized.signal()
            }
            let gate = DispatchSemaphore(value: 0)
            queue.async {
                gate.wait()
                log.withLock { $0.append("last block") }
            }
            gate.signal()
        }
        XCTAssertEqual(finalized.wait(timeout: .now() + 30), .success)
        target.sync {}
        XCTAssertNil(weakQueue, "the queue was not freed")
        XCTAssertEqual(log.withLock { $0 }, ["last block", "finalizer(the context) on target 7"])
    }

    func testNoContextMeansNoFinalizerCallAsInLibdispatch() {
        let target = TKDispatchQueue(label: "finalizers")
        let calls = Guarded<[String]>([])
        let second = DispatchSemaphore(value: 0)
        do {
            let without = TKDispatchQueue(label: "without", target: target)
            without.setFinalizer { _ in calls.withLock { $0.append("without") } }
        }
        do {
            let with = TKDispatchQueue(label: "with", target: target)
            with.context = 1
            with.setFinalizer { _ in
                calls.withLock { $0.append("with") }
                second.signal()
            }
        }
        // Finalizers are submitted to the serial target in the order the queues were freed.
        XCTAssertEqual(second.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(calls.withLock { $0 }, ["with"])
    }

    // MARK: debugDescription

    func testAQueuesDebugDescriptionShowsItsState() {
        let target = TKDispatchQueue(label: "parent")
        let queue = TKDispatchQueue(label: "uploads", qos: .utility, attributes: .initiallyInactive, target: target)
        queue.suspend()
        queue.suspend()
        for _ in 0..<3 { queue.async {} }
        let text = queue.debugDescription
        for fragment in [
            "\"uploads\"", "serial", "qos: utility", "width: 1", "target: \"parent\"", "inactive",
            "suspend count: 2", "pending: 3",
        ] {
            XCTAssertTrue(text.contains(fragment), "\(fragment) missing from \(text)")
        }
        queue.resume()
        queue.resume()
        queue.activate()
        queue.sync {}
        XCTAssertTrue(queue.debugDescription.contains("suspend count: 0"))
        XCTAssertTrue(queue.debugDescription.contains("pending: 0"))
        XCTAssertTrue(queue.debugDescription.contains(" active"))
        let wide = TKDispatchQueue(label: "wide", attributes: .concurrent)
        XCTAssertTrue(wide.debugDescription.contains("concurrent"), wide.debugDescription)
        XCTAssertTrue(TKDispatchQueue.global().debugDescription.contains("global"))
    }

    func testAGroupsDebugDescriptionShowsItsCount() {
        let group = TKDispatchGroup()
        XCTAssertTrue(group.debugDescription.contains("count: 0"), group.debugDescription)
        group.enter()
        group.enter()
        XCTAssertTrue(group.debugDescription.contains("count: 2"), group.debugDescription)
        group.notify(queue: .global()) {}
        XCTAssertTrue(group.debugDescription.contains("notifications pending: 1"), group.debugDescription)
        group.leave()
        group.leave()
        XCTAssertTrue(group.debugDescription.contains("count: 0"), group.debugDescription)
    }

    func testASourcesDebugDescriptionShowsTypeHandleAndState() {
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pair), 0)
        defer {
            close(pair[0])
            close(pair[1])
        }
        let queue = TKDispatchQueue(label: "sources")
        let source = TKDispatchSource.makeReadSource(fileDescriptor: pair[0], queue: queue)
        XCTAssertEqual(source.handle, pair[0])
        var text = source.debugDescription
        for fragment in ["type: read", "handle: \(pair[0])", "queue: \"sources\"", "inactive"] {
            XCTAssertTrue(text.contains(fragment), "\(fragment) missing from \(text)")
        }
        let cancelled = DispatchSemaphore(value: 0)
        source.setCancelHandler { cancelled.signal() }
        source.activate()
        source.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success)
        text = source.debugDescription
        XCTAssertTrue(text.contains("cancelled"), text)
        let signal = TKDispatchSource.makeUserDataAddSource(queue: queue)
        XCTAssertTrue(signal.debugDescription.contains("type: data add"), signal.debugDescription)
    }
}

/// Retargeting misuses, each an exit test (Support/MisuseAssertions.swift).
@Suite struct DispatchQueueTargetExitTests {
    @Test func retargetingAnActiveQueueStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDispatchQueue(label: "thumbnails").setTarget(queue: TKDispatchQueue(label: "io"))
        }
        expectMisuse(
            result, mentions: ["TKDispatchQueue \"thumbnails\"", "setTarget(queue: \"io\")", "active queue", "initiallyInactive"])
    }

    @Test func retargetingAGlobalQueueStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDispatchQueue.global().setTarget(queue: TKDispatchQueue(label: "io"))
        }
        expectMisuse(result, mentions: ["setTarget(queue:", "cannot be retargeted", "Fix:"])
    }

    @Test func aTargetLoopStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let a = TKDispatchQueue(label: "a", attributes: .initiallyInactive)
            let b = TKDispatchQueue(label: "b", target: a)
            a.setTarget(queue: b)
        }
        expectMisuse(result, mentions: ["TKDispatchQueue \"a\"", "loop back", "Fix:"])
    }
}
