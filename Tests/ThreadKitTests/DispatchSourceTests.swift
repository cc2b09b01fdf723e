// TKDispatchSource: timers (never early, repeating, countdown that cancels itself), user data
// coalescing (add and or), read/write readiness on a pipe, signals (in a child: see
// DispatchMisuseTests), suspend/resume, cancel handler once, event handler never concurrent.
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchSourceTests: XCTestCase {
    func testAOneShotTimerFiresOnceAndNeverEarly() {
        let source = TKDispatchSource.makeTimerSource(queue: .global())
        let deadline = ContinuousClock.now + .milliseconds(10)
        let firedAt = Shared<ContinuousClock.Instant?>(nil)
        let fires = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        source.schedule(deadline: deadline)
        source.setEventHandler {
            firedAt.value = ContinuousClock.now
            fires.wrappingAdd(1, ordering: .relaxed)
            done.signal()
        }
        source.activate()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertGreaterThanOrEqual(firedAt.value!, deadline)
        XCTAssertEqual(source.data, 1)
        source.cancel()
        XCTAssertEqual(fires.load(ordering: .relaxed), 1)
    }

    func testACountdownTimerCancelsItselfAndItsCancelHandlerRunsOnce() {
        // The seeds' countdown: a repeating 5 ms timer counts 5 → 0, then cancels itself.
        let queue = TKDispatchQueue(label: "countdown")
        let timer = TKDispatchSource.makeTimerSource(queue: queue)
        let remaining = Shared(5) // queue only
        let ticks = Shared<[Int]>([]) // queue only
        let cancelled = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let start = ContinuousClock.now
        let firstFire = start + .milliseconds(5)
        let fireTimes = Shared<[ContinuousClock.Instant]>([])
        timer.schedule(deadline: firstFire, repeating: .milliseconds(5))
        timer.setEventHandler {
            fireTimes.value.append(ContinuousClock.now)
            remaining.value -= 1
            ticks.value.append(remaining.value)
            if remaining.value == 0 { timer.cancel() }
        }
        timer.setCancelHandler {
            cancelled.wrappingAdd(1, ordering: .relaxed)
            done.signal()
        }
        timer.resume()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        queue.sync {}
        XCTAssertEqual(ticks.value.last, 0)
        XCTAssertEqual(cancelled.load(ordering: .relaxed), 1)
        XCTAssertTrue(timer.isCancelled)
        // Fire k is never before firstFire + (k × interval) for the fires counted so far.
        var slot = 0
        for (i, t) in fireTimes.value.enumerated() {
            XCTAssertGreaterThanOrEqual(t, firstFire + .milliseconds(5) * slot, "fire \(i) was early")
            slot += 1
        }
    }

    func testARepeatingTimerOnASuspendedQueueCostsNothingAndCountsWhatItMissed() {
        // libdispatch's program: a fast repeating timer whose queue is suspended used to keep the
        // manager thread busy (a fire per interval, none delivered). Now the timer waits for the
        // delivery and counts the slots that passed when its handler finally runs.
        let queue = TKDispatchQueue(label: "suspended-timer")
        queue.suspend()
        let source = TKDispatchSource.makeTimerSource(queue: queue)
        let fired = Atomic<Int>(0)
        let delivered = DispatchSemaphore(value: 0)
        source.setEventHandler {
            fired.add(Int(source.data), ordering: .relaxed)
            delivered.signal()
        }
        let interval = Duration.microseconds(100)
        let start = ContinuousClock.now
        source.schedule(deadline: start, repeating: interval)
        source.activate()
        let cpuBefore = ProcessProbe.cpuTime
        let idle = ContinuousClock.now
        while ContinuousClock.now - idle < .milliseconds(500) { usleep(20_000) }
        let cpu = ProcessProbe.cpuTime - cpuBefore
        XCTAssertLessThan(cpu, .milliseconds(100), "a timer nobody can handle must not keep a thread busy")
        let cancelled = DispatchSemaphore(value: 0)
        source.setCancelHandler { cancelled.signal() }
        queue.resume()
        XCTAssertEqual(delivered.wait(timeout: .now() + 30), .success)
        source.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success) // no delivery after this
        // The deliveries carry every slot missed while the queue was suspended: at least those of
        // the 0.5 s idle, never more than have passed.
        let count = fired.load(ordering: .relaxed)
        let slots = Int((ContinuousClock.now - start) / interval) + 1
        XCTAssertGreaterThanOrEqual(count, 5_000 - 1)
        XCTAssertLessThanOrEqual(count, slots)
    }

    func testUserDataAddCoalescesWhileTheHandlerIsHeldUp() {
        let queue = TKDispatchQueue(label: "adds")
        let source = TKDispatchSource.makeUserDataAddSource(queue: queue)
        let total = Atomic<UInt>(0)
        let calls = Atomic<Int>(0)
        source.setEventHandler {
            total.wrappingAdd(source.data, ordering: .relaxed)
            calls.wrappingAdd(1, ordering: .relaxed)
        }
        source.activate()
        queue.suspend()
        for _ in 0..<1_000 { source.add(data: 2) }
        queue.resume()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { total.load(ordering: .relaxed) == 2_000 })
        XCTAssertLessThan(calls.load(ordering: .relaxed), 1_000, "adds were not coalesced")
        source.cancel()
    }

    func testUserDataOrMergesBits() {
        let queue = TKDispatchQueue(label: "ors")
        let source = TKDispatchSource.makeUserDataOrSource(queue: queue)
        let seen = Atomic<UInt>(0)
        source.setEventHandler { seen.bitwiseOr(source.data, ordering: .relaxed) }
        source.activate()
        queue.suspend()
        source.add(data: 0b001)
        source.add(data: 0b100)
        source.add(data: 0b001)
        queue.resume()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { seen.load(ordering: .relaxed) == 0b101 })
        source.cancel()
    }

    func testTheEventHandlerNeverRunsConcurrentlyWithItselfOnAConcurrentQueue() {
        let queue = TKDispatchQueue(label: "wide", attributes: .concurrent)
        let source = TKDispatchSource.makeUserDataAddSource(queue: queue)
        let inside = Atomic<Int>(0)
        let overlap = Atomic<Int>(0)
        let sum = Atomic<UInt>(0)
        source.setEventHandler {
            if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlap.wrappingAdd(1, ordering: .relaxed) }
            sum.wrappingAdd(source.data, ordering: .relaxed)
            for _ in 0..<1_000 { _ = inside.load(ordering: .relaxed) }
            inside.wrappingSubtract(1, ordering: .relaxed)
        }
        source.activate()
        let n = stress(20_000)
        let adders = TestThread.spawn(2, "adder") { _ in for _ in 0..<n { source.add(data: 1) } }
        XCTAssertTrue(joinAll(adders))
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { sum.load(ordering: .relaxed) == UInt(2 * n) })
        XCTAssertEqual(overlap.load(ordering: .relaxed), 0)
        source.cancel()
    }

    func testNothingIsDeliveredBeforeActivationOrWhileSuspended() {
        let queue = TKDispatchQueue(label: "gated")
        let source = TKDispatchSource.makeUserDataAddSource(queue: queue)
        let calls = Atomic<Int>(0)
        let registered = Atomic<Int>(0)
        source.setEventHandler { calls.wrappingAdd(1, ordering: .relaxed) }
        source.setRegistrationHandler { registered.wrappingAdd(1, ordering: .relaxed) }
        source.add(data: 1)
        queue.sync {}
        XCTAssertEqual(calls.load(ordering: .relaxed), 0, "an inactive source delivered")
        source.activate()
        // What was merged before activation is delivered once the source is active.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { calls.load(ordering: .relaxed) == 1 })
        XCTAssertEqual(registered.load(ordering: .relaxed), 1)
        source.suspend()
        source.add(data: 1)
        queue.sync {}
        usleep(10_000) // a "never" check: a suspended source must not deliver
        queue.sync {}
        XCTAssertEqual(calls.load(ordering: .relaxed), 1, "a suspended source delivered")
        source.resume()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { calls.load(ordering: .relaxed) == 2 })
        source.cancel()
    }

    func testReadAndWriteSourcesReportPipeReadiness() {
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pair), 0)
        let fds = pair
        defer {
            close(fds[0])
            close(fds[1])
        }
        let queue = TKDispatchQueue(label: "pipe")
        let reader = TKDispatchSource.makeReadSource(fileDescriptor: fds[0], queue: queue)
        let received = Shared<[UInt8]>([]) // queue only
        let gotAll = DispatchSemaphore(value: 0)
        reader.setEventHandler {
            let available = Int(reader.data)
            var buffer = [UInt8](repeating: 0, count: max(available, 1))
            let n = read(fds[0], &buffer, buffer.count)
            if n > 0 { received.value += buffer[0..<n] }
            if received.value.count >= 6 { gotAll.signal() }
        }
        reader.activate()
        let writer = TKDispatchSource.makeWriteSource(fileDescriptor: fds[1], queue: queue)
        let writable = DispatchSemaphore(value: 0)
        writer.setEventHandler {
            writer.cancel()
            writable.signal()
        }
        writer.activate()
        XCTAssertEqual(writable.wait(timeout: .now() + 30), .success, "an empty pipe is writable")
        _ = "abc".withCString { write(fds[1], $0, 3) }
        usleep(5_000)
        _ = "def".withCString { write(fds[1], $0, 3) }
        XCTAssertEqual(gotAll.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(String(decoding: queue.sync { received.value }, as: UTF8.self), "abcdef")
        let cancelled = DispatchSemaphore(value: 0)
        reader.setCancelHandler { cancelled.signal() }
        reader.cancel()
        XCTAssertEqual(cancelled.wait(timeout: .now() + 30), .success)
    }

    func testCancelBeforeActivationRunsTheCancelHandlerOnce() {
        let source = TKDispatchSource.makeTimerSource(queue: .global())
        let cancelled = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        source.setEventHandler { XCTFail("a cancelled timer fired") }
        source.setCancelHandler {
            cancelled.wrappingAdd(1, ordering: .relaxed)
            done.signal()
        }
        source.schedule(deadline: .now)
        source.cancel()
        source.cancel()
        source.activate()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        usleep(10_000)
        XCTAssertEqual(cancelled.load(ordering: .relaxed), 1)
    }
}
