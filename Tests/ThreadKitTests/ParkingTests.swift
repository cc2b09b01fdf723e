import Foundation
import Synchronization
import XCTest

// Parking, the one blocking primitive: deadlines never early, no sleep when the word already
// changed, unpark wakes, and the per-thread observer sees every park.
@testable import ThreadKit

final class ParkingTests: XCTestCase {
    func testParkTimesOutNeverEarly() {
        let word = FutexWord(5)
        for ms in [1, 10, 50] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            while Parking.park(word, expected: 5, deadline: deadline) {}
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        }
        XCTAssertFalse(Parking.park(word, expected: 5, deadline: .now - .seconds(1)))
    }

    func testParkReturnsAtOnceWhenTheWordDiffers() {
        let word = FutexWord(1)
        XCTAssertTrue(Parking.park(word, expected: 2, deadline: .now + .seconds(30)))
    }

    func testUnparkWakesAParkedThread() {
        let word = FutexWord(0)
        let done = Workers.start {
            while word.pointer.pointee.load(ordering: .acquiring) == 0 {
                _ = Parking.park(word, expected: 0, deadline: .now + .seconds(30))
            }
        }
        word.pointer.pointee.store(1, ordering: .releasing)
        Parking.unparkAll(word)
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    final class CountingObserver: ParkingObserver, @unchecked Sendable {
        let parks = Atomic<Int>(0), unparks = Atomic<Int>(0)
        func willPark() { parks.wrappingAdd(1, ordering: .relaxed) }
        func didUnpark() { unparks.wrappingAdd(1, ordering: .relaxed) }
    }

    func testTheThreadsObserverSeesEveryParkOfALockWait() {
        let observer = CountingObserver()
        let lock = TKLock()
        lock.lock()
        let blocked = Workers.start {
            Parking.setObserverForCurrentThread(observer)
            lock.lock() // spins briefly, then parks: the observer must hear of it
            lock.unlock()
            Parking.setObserverForCurrentThread(nil)
        }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) { observer.parks.load(ordering: .relaxed) >= 1 }, "timed out waiting until the waiter parks")
        lock.unlock()
        XCTAssertEqual(blocked.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(observer.parks.load(ordering: .relaxed), observer.unparks.load(ordering: .relaxed))
        XCTAssertGreaterThanOrEqual(observer.parks.load(ordering: .relaxed), 1)
    }
}
