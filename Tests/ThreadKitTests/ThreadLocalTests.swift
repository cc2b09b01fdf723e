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
        let destroyed = Shared<[Int]>([])   // guarded by lock
        let lock = NSLock()
        let local = TKThreadLocal<Int> { value in
            lock.lock()
            destroyed.value.append(value)
            lock.unlock()
        }
        let threads = (1...3).map { n in TKThread { local.value = n } }
        for t in threads { t.start() }
        for t in threads { XCTAssertTrue(t.join(until: .now + .seconds(30))) }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { lock.lock(); defer { lock.unlock() }; return destroyed.value.count == 3 }, "timed out waiting until three destructors ran")
        lock.lock(); defer { lock.unlock() }
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
}
