// The seeds' GCD scenarios (the Concurrency Programming Guide and the GCD articles in seeds/):
// the photo store (sync reads, barrier writes on a custom concurrent queue), downloading three
// items with a group (wait and notify), a singleton with once. (concurrentPerform, the semaphore
// guarding two resources and the self-cancelling countdown timer have their own test files.)
import Dispatch
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DispatchSeedScenarioTests: XCTestCase {
    /// The photo manager: readers get a consistent copy with sync; writers add with a barrier.
    final class PhotoStore: @unchecked Sendable {
        private let queue = TKDispatchQueue(label: "photo-store", attributes: .concurrent)
        private var photos: [String] = [] // guarded by `queue`: read in sync blocks, written in barriers

        func add(_ photo: String, group: TKDispatchGroup) {
            queue.async(group: group, flags: .barrier) { self.photos.append(photo) }
        }

        var all: [String] { queue.sync { photos } }
    }

    func testThePhotoStoreReadsAreConsistentWhileWritersAdd() {
        let store = PhotoStore()
        let group = TKDispatchGroup()
        let writers = stress(2_000)
        let inconsistent = Atomic<Int>(0)
        let readers = TestThread.spawn(3, "reader") { _ in
            var last = 0
            for _ in 0..<stress(5_000) {
                let snapshot = store.all
                // Photos are only ever appended: a later snapshot never shrinks, and each is a prefix.
                if snapshot.count < last { inconsistent.wrappingAdd(1, ordering: .relaxed) }
                last = snapshot.count
            }
        }
        for i in 0..<writers { store.add("photo-\(i)", group: group) }
        XCTAssertEqual(group.wait(until: .now + .seconds(60)), .success)
        XCTAssertTrue(joinAll(readers, until: .now + .seconds(60)))
        XCTAssertEqual(inconsistent.load(ordering: .relaxed), 0)
        XCTAssertEqual(store.all, (0..<writers).map { "photo-\($0)" }, "barrier writes run in submission order")
    }

    func testDownloadingThreeItemsWithAGroupWaitAndNotify() {
        let group = TKDispatchGroup()
        let downloads = Shared<[String: Int]>([:])
        let lock = NSLock()
        let notified = DispatchSemaphore(value: 0)
        for (name, delay) in [("a.png", 3), ("b.png", 1), ("c.png", 2)] {
            group.enter()
            TKDispatchQueue.global(qos: .utility).asyncAfter(deadline: .now + .milliseconds(delay)) {
                lock.lock()
                downloads.value[name] = delay
                lock.unlock()
                group.leave()
            }
        }
        group.notify(queue: .global()) {
            lock.lock()
            let count = downloads.value.count
            lock.unlock()
            if count == 3 { notified.signal() }
        }
        XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success)
        lock.lock()
        XCTAssertEqual(Set(downloads.value.keys), ["a.png", "b.png", "c.png"])
        lock.unlock()
        XCTAssertEqual(notified.wait(timeout: .now() + 30), .success, "notify ran after all three downloads")
    }

    enum Singleton {
        static let once = TKOnce()
        nonisolated(unsafe) static var instance: Int? // written once inside `once`
        static let made = Atomic<Int>(0)
        static var shared: Int {
            once.run {
                made.wrappingAdd(1, ordering: .relaxed)
                instance = 42
            }
            return instance!
        }
    }

    func testASingletonMadeWithOnceFromManyQueueItems() {
        let group = TKDispatchGroup()
        let wrong = Atomic<Int>(0)
        for _ in 0..<200 {
            TKDispatchQueue.global().async(group: group) { if Singleton.shared != 42 { wrong.wrappingAdd(1, ordering: .relaxed) } }
        }
        XCTAssertEqual(group.wait(until: .now + .seconds(30)), .success)
        XCTAssertEqual(wrong.load(ordering: .relaxed), 0)
        XCTAssertEqual(Singleton.made.load(ordering: .relaxed), 1)
    }
}
