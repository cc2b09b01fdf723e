// TKNotificationCenter: matching by name and/or sender, order, synchronous delivery, changes made
// during a post (from inside a delivery and from other threads), weakly held senders.
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

private let ping: TKNotification.Name = "Ping"
private let pong: TKNotification.Name = "Pong"

final class NotificationCenterTests: XCTestCase {

    final class Sender: Sendable {}

    func testMatchingByNameObjectBothAndNeither() {
        let center = TKNotificationCenter()
        let a = Sender()
        let b = Sender()
        let log = Shared<[String]>([]) // written on this (the posting) thread only
        center.addObserver(forName: ping, object: nil) { _ in log.value.append("name") }
        center.addObserver(forName: nil, object: a) { _ in log.value.append("object") }
        center.addObserver(forName: ping, object: a) { _ in log.value.append("both") }
        center.addObserver(forName: nil, object: nil) { _ in log.value.append("all") }
        center.post(name: ping, object: a)
        XCTAssertEqual(log.value, ["name", "object", "both", "all"], "registration order")
        log.value = []
        center.post(name: ping, object: b)
        XCTAssertEqual(log.value, ["name", "all"])
        log.value = []
        center.post(name: pong, object: a)
        XCTAssertEqual(log.value, ["object", "all"])
        log.value = []
        center.post(name: pong)
        XCTAssertEqual(log.value, ["all"])
    }

    func testDeliveryIsSynchronousOnThePostingThreadWithUserInfo() {
        let center = TKNotificationCenter()
        let seen = Shared<(pthread_t?, Int?)>((nil, nil))
        center.addObserver(forName: ping, object: nil) { note in seen.value = (pthread_self(), note.userInfo?["n"] as? Int) }
        let poster = Workers.start { center.post(name: ping, userInfo: ["n": 7]) }
        XCTAssertEqual(poster.wait(timeout: .now() + 30), .success)
        center.post(name: ping, userInfo: ["n": 8])
        XCTAssertTrue(pthread_equal(seen.value.0!, pthread_self()) != 0)
        XCTAssertEqual(seen.value.1, 8)
    }

    func testRemovedObserversAreNotCalled() {
        let center = TKNotificationCenter()
        let calls = Shared(0)
        let token = center.addObserver(forName: ping, object: nil) { _ in calls.value += 1 }
        center.post(name: ping)
        center.removeObserver(token)
        center.removeObserver(token) // twice: harmless
        TKNotificationCenter().removeObserver(token) // another center: harmless
        center.post(name: ping)
        XCTAssertEqual(calls.value, 1)
        XCTAssertEqual(Set([token, token]).count, 1)
    }

    func testRemovingFromInsideADelivery() {
        let center = TKNotificationCenter()
        let log = Shared<[String]>([])
        let later = Shared<TKObservationToken?>(nil)
        let selfRemoving = Shared<TKObservationToken?>(nil)
        selfRemoving.value = center.addObserver(forName: ping, object: nil) { _ in
            log.value.append("first")
            center.removeObserver(selfRemoving.value!)
            center.removeObserver(later.value!)
        }
        later.value = center.addObserver(forName: ping, object: nil) { _ in log.value.append("later") }
        center.post(name: ping)
        center.post(name: ping)
        XCTAssertEqual(log.value, ["first"], "a removed observer must not be called, even later in the same post")
    }

    func testAddingFromInsideADeliveryTakesEffectNextPost() {
        let center = TKNotificationCenter()
        let log = Shared<[String]>([])
        let added = Shared(false)
        center.addObserver(forName: ping, object: nil) { _ in
            log.value.append("outer")
            if !added.value {
                added.value = true
                center.addObserver(forName: ping, object: nil) { _ in log.value.append("inner") }
            }
        }
        center.post(name: ping)
        XCTAssertEqual(log.value, ["outer"])
        center.post(name: ping)
        XCTAssertEqual(log.value, ["outer", "outer", "inner"])
    }

    func testConcurrentPostsWithObserversComingAndGoing() {
        let center = TKNotificationCenter()
        let delivered = JudgedCounter()
        let permanent = center.addObserver(forName: ping, object: nil) { _ in delivered.add() }
        let perThread = stress(25_000)
        let stop = Atomic<Bool>(false)
        let churned = JudgedCounter()
        let churn = Workers.start {
            while !stop.load(ordering: .relaxed) {
                let token = center.addObserver(forName: ping, object: nil) { _ in }
                center.removeObserver(token)
                churned.add()
            }
        }
        Workers.run(4) { _ in for _ in 0..<perThread { center.post(name: ping) } }
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(churn.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(delivered.count, 4 * perThread, "every post reaches the permanent observer exactly once")
        XCTAssertGreaterThan(churned.count, 0)
        center.removeObserver(permanent)
    }

    func testNoCallStartsAfterRemoveObserverReturns() {
        // A poster thread posts in a loop and counts its completed posts. Posts on one thread are
        // sequential, so once two more posts have completed after removeObserver returned, every
        // call started before the removal has finished; from then on the count must not move.
        let center = TKNotificationCenter()
        let calls = Atomic<Int>(0)
        let postsDone = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let token = center.addObserver(forName: ping, object: nil) { _ in calls.wrappingAdd(1, ordering: .relaxed) }
        let poster = Workers.start {
            while !stop.load(ordering: .relaxed) {
                center.post(name: ping)
                postsDone.wrappingAdd(1, ordering: .releasing)
            }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { calls.load(ordering: .relaxed) >= 100 })
        center.removeObserver(token)
        let atRemoval = postsDone.load(ordering: .acquiring)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { postsDone.load(ordering: .acquiring) >= atRemoval + 2 })
        let settled = calls.load(ordering: .relaxed)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { postsDone.load(ordering: .acquiring) >= atRemoval + 1_000 })
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(poster.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(calls.load(ordering: .relaxed), settled, "a call started after removeObserver returned")
    }

    func testAGoneSenderNeverMatchesANewObject() {
        let center = TKNotificationCenter()
        let calls = Shared(0)
        var sender: Sender? = Sender()
        center.addObserver(forName: ping, object: sender) { _ in calls.value += 1 }
        center.post(name: ping, object: sender)
        sender = nil
        for _ in 0..<100 { center.post(name: ping, object: Sender()) } // may reuse the old address
        XCTAssertEqual(calls.value, 1)
    }

    func testRemovedObserversAndWhatTheirBlocksCapturedAreFreed() {
        let center = TKNotificationCenter()
        let alive = Freed.alive { freed in
            let captured = Sender()
            let queue = TKOperationQueue()
            let plain = center.addObserver(forName: ping, object: nil) { _ in _ = captured }
            let queued = center.addObserver(forName: ping, object: captured, queue: queue) { _ in _ = captured }
            freed.watch("token", plain)
            freed.watch("token with a queue", queued)
            freed.watch("object captured by the blocks", captured)
            freed.watch("observer queue", queue)
            center.post(name: ping, object: captured)
            center.removeObserver(plain)
            center.removeObserver(queued)
        }
        XCTAssertEqual(alive, [])
        XCTAssertEqual(center.observerCount, 0)
    }

    func testDefaultIsOneSharedCenter() {
        XCTAssertTrue(TKNotificationCenter.default === TKNotificationCenter.default)
    }
}
