// TKNotificationCenter with an observer queue (SPEC §5 with §7): the block runs as an operation on
// that queue (`.main`: on the main thread), the post returns after enqueueing without waiting for
// it, an observer removed before its operation starts is not called, and a nil queue still means
// synchronous delivery on the posting thread.
import Dispatch
import Foundation
import ThreadKit
import XCTest

private let photoReady: TKNotification.Name = "PhotoReady"

final class OperationNotificationTests: XCTestCase {
    func testAnObserverWithAQueueRunsAsAnOperationOnIt() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.name = "observers"
        let log = EventLog()
        let delivered = DispatchGroup()
        delivered.enter()
        center.addObserver(forName: photoReady, object: nil, queue: queue) { note in
            log.append("\(TKOperationQueue.current?.name ?? "no queue") \(note.userInfo?["id"] as? Int ?? -1)")
            delivered.leave()
        }
        center.post(name: photoReady, userInfo: ["id": 7])
        XCTAssertEqual(delivered.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(log.all, ["observers 7"])
    }

    func testPostingReturnsAfterEnqueueingWithoutWaitingForTheBlock() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        let posted = TKDispatchSemaphore(value: 0)
        let sawPostReturn = JudgedCounter()
        let done = DispatchGroup()
        done.enter()
        center.addObserver(forName: photoReady, object: nil, queue: queue) { _ in
            // Runs only once post() has returned: a post that waited for it would time out here.
            if posted.wait(until: .now + .seconds(20)) == .success { sawPostReturn.add() }
            done.leave()
        }
        center.post(name: photoReady)
        posted.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(sawPostReturn.count, 1)
    }

    func testObserversOnTheMainQueueRunOnTheMainThread() {
        let center = TKNotificationCenter()
        let onMain = Shared<Bool?>(nil)   // written on the main thread, read there
        center.addObserver(forName: photoReady, object: nil, queue: .main) { _ in onMain.value = TKThread.isMainThread }
        TKDispatchQueue.global().async { center.post(name: photoReady) }
        let deadline = ContinuousClock.now + .seconds(30)
        while onMain.value == nil && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(50))
        }
        XCTAssertEqual(onMain.value, true)
    }

    func testAnObserverRemovedBeforeItsOperationStartsIsNotCalled() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.isSuspended = true
        let calls = JudgedCounter()
        let token = center.addObserver(forName: photoReady, object: nil, queue: queue) { _ in calls.add() }
        center.post(name: photoReady)
        XCTAssertEqual(queue.operationCount, 1, "the post added one operation")
        center.removeObserver(token)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(calls.count, 0)
    }

    func testEachPostIsOneOperationAndASerialQueueKeepsPostOrder() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 1
        let log = EventLog()
        center.addObserver(forName: photoReady, object: nil, queue: queue) { note in log.append("\(note.userInfo?["id"] as? Int ?? -1)") }
        for i in 0..<100 { center.post(name: photoReady, userInfo: ["id": i]) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, (0..<100).map { "\($0)" })
    }

    func testANilQueueDeliversSynchronouslyOnThePostingThread() {
        let center = TKNotificationCenter()
        let thread = Shared<UInt32?>(nil)   // written during post, on this thread
        center.addObserver(forName: photoReady, object: nil, queue: nil) { _ in thread.value = UInt32(KernelThread.currentID()) }
        center.post(name: photoReady)
        XCTAssertEqual(thread.value, UInt32(KernelThread.currentID()))
    }
}
