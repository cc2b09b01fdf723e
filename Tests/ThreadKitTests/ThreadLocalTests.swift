// TKThreadLocal: one value per thread; the destructor runs on the exiting thread with its value.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class ThreadLocalTests: XCTestCase {
    func testEachThreadSeesItsOwnValue() {
        let local = TKThreadLocal<Int>()
        local.value = 1
        let seen = JudgedCounter()
        Workers.run(4) { index in
            if local.value == nil { seen.add() }
            local.value = index + 10
            if local.value == index + 10 { seen.add() }
        }
        XCTAssertEqual(seen.count, 8)
        XCTAssertEqual(local.value, 1)
        local.value = nil
        XCTAssertNil(local.value)
    }

    func testDestructorRunsAtThreadExitOnThatThread() {
        let destroyed = Shared<[Int]>([]) // guarded by lock
        let lock = NSLock()
        let local = TKThreadLocal<Int> { value in
            lock.lock()
            destroyed.value.append(value)
            lock.unlock()
        }
        let threads = (1...3).map { n in TKThread { local.value = n } }
        for t in threads { t.start() }
        for t in threads { XCTAssertTrue(t.join(until: .now + .seconds(30))) }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) {
                lock.lock()
                defer { lock.unlock() }
                return destroyed.value.count == 3
            }, "timed out waiting until three destructors ran")
        lock.lock()
        defer { lock.unlock() }
        XCTAssertEqual(destroyed.value.sorted(), [1, 2, 3])
    }

    func testClearingAValueDoesNotRunTheDestructor() {
        let ran = Atomic<Int>(0)
        let local = TKThreadLocal<String> { _ in ran.wrappingAdd(1, ordering: .relaxed) }
        let t = TKThread {
            local.value = "a"
            local.value = "b"
            local.value = nil
        }
        t.start()
        XCTAssertTrue(t.join(until: .now + .seconds(30)))
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
    }

    // MARK: Dropping a TKThreadLocal while threads hold values (issue 15, item 8)

    /// A value that counts its own deallocation (64 KiB of payload, as in the report).
    final class Payload: @unchecked Sendable {
        let bytes = [UInt8](repeating: 1, count: 64 * 1024)
        let freed: JudgedCounter
        init(_ freed: JudgedCounter) { self.freed = freed }
        deinit { freed.add() }
    }

    func testValuesHeldByLiveThreadsAreFinishedWhenTheLocalIsDeinitialised() {
        let n = stress(32)
        let destroyed = JudgedCounter()
        let freed = JudgedCounter()
        let holding = DispatchSemaphore(value: 0)
        let exit = DispatchSemaphore(value: 0)
        let exited = DispatchSemaphore(value: 0)
        var local: TKThreadLocal<Payload>? = TKThreadLocal<Payload> { _ in destroyed.add() }
        // Each thread reaches the local through an unowned reference: the test's is the only one.
        let threads = (0..<n).map { _ in
            Thread { [unowned local = local!] in
                local.value = Payload(freed)
                holding.signal()
                exit.wait()
                exited.signal()
            }
        }
        for t in threads { t.start() }
        for _ in 0..<n { XCTAssertEqual(holding.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(destroyed.count, 0)
        local = nil
        // Deinitialised here, on this thread, with every holder alive: all finished at once.
        XCTAssertEqual(destroyed.count, n)
        XCTAssertEqual(freed.count, n)
        for _ in 0..<n { exit.signal() }
        for _ in 0..<n { XCTAssertEqual(exited.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(destroyed.count, n, "a thread exiting later runs nothing again")
    }

    func testThreadsExitingWhileTheLocalIsDroppedFinishEachValueOnce() {
        let rounds = stress(50)
        for _ in 0..<rounds {
            let destroyed = JudgedCounter()
            let freed = JudgedCounter()
            let holding = DispatchSemaphore(value: 0)
            let go = DispatchSemaphore(value: 0)
            let n = 4
            var local: TKThreadLocal<Payload>? = TKThreadLocal<Payload> { _ in destroyed.add() }
            let threads = (0..<n).map { _ in
                TKThread { [unowned local = local!] in
                    local.value = Payload(freed)
                    holding.signal()
                    go.wait()
                }
            }
            for t in threads { t.start() }
            for _ in 0..<n { XCTAssertEqual(holding.wait(timeout: .now() + 30), .success) }
            for _ in 0..<n { go.signal() }
            local = nil // races with the threads' exits
            for t in threads { XCTAssertTrue(t.join(until: .now + .seconds(30))) }
            XCTAssertEqual(destroyed.count, n)
            XCTAssertEqual(freed.count, n)
        }
    }
}
