// TKDispatchWorkItem: perform, wait, notify, cancel before start (never runs), barrier items.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchWorkItemTests: XCTestCase {
    func testPerformRunsTheBlockOnTheCallersThreadAndNotifies() {
        let ran = Atomic<Int>(0)
        let item = TKDispatchWorkItem { ran.wrappingAdd(1, ordering: .relaxed) }
        let notified = DispatchSemaphore(value: 0)
        item.notify(queue: .global()) { notified.signal() }
        item.perform()
        item.wait()
        XCTAssertEqual(ran.load(ordering: .relaxed), 1)
        XCTAssertEqual(notified.wait(timeout: .now() + 30), .success)
    }

    func testWaitReturnsAfterTheQueueRanTheItem() {
        let queue = TKDispatchQueue(label: "items")
        let value = Shared(0)
        let item = TKDispatchWorkItem { value.value = 42 }
        queue.async(execute: item)
        item.wait()
        XCTAssertEqual(value.value, 42)
    }

    func testAnItemCancelledBeforeItStartsNeverRuns() {
        let queue = TKDispatchQueue(label: "cancel")
        let ran = Atomic<Int>(0)
        let notified = DispatchSemaphore(value: 0)
        queue.suspend()
        let item = TKDispatchWorkItem { ran.wrappingAdd(1, ordering: .relaxed) }
        item.notify(queue: .global()) { notified.signal() }
        queue.async(execute: item)
        item.cancel()
        XCTAssertTrue(item.isCancelled)
        queue.resume()
        item.wait()
        queue.sync {}
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        XCTAssertEqual(notified.wait(timeout: .now() + 30), .success, "a skipped item still finishes: notify runs")
    }

    func testCancelDoesNotInterruptARunningItem() {
        let started = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let finished = Atomic<Bool>(false)
        let item = TKDispatchWorkItem {
            started.signal()
            proceed.wait()
            finished.store(true, ordering: .relaxed)
        }
        TKDispatchQueue.global().async(execute: item)
        XCTAssertEqual(started.wait(timeout: .now() + 30), .success)
        item.cancel()
        proceed.signal()
        item.wait()
        XCTAssertTrue(finished.load(ordering: .relaxed))
    }

    func testABarrierItemRunsAloneOnAConcurrentQueue() {
        let queue = TKDispatchQueue(label: "barrier-items", attributes: .concurrent)
        let inside = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        let group = TKDispatchGroup()
        for _ in 0..<100 {
            queue.async(group: group) {
                inside.wrappingAdd(1, ordering: .relaxed)
                inside.wrappingSubtract(1, ordering: .relaxed)
            }
        }
        let barrier = TKDispatchWorkItem(flags: .barrier) {
            if inside.load(ordering: .relaxed) != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
        }
        queue.async(execute: barrier)
        for _ in 0..<100 {
            queue.async(group: group) {
                inside.wrappingAdd(1, ordering: .relaxed)
                inside.wrappingSubtract(1, ordering: .relaxed)
            }
        }
        barrier.wait()
        XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success)
        XCTAssertEqual(violations.load(ordering: .relaxed), 0)
    }
}
