// TKNotificationCenter with an observer queue (SPEC §5 with §7): the block runs on that queue
// (`.main`: on the main thread) and the post returns only after it ran, as Apple's: inline when
// posted from that queue (its own operation, or the main thread for `.main`, so a serial queue
// posting to itself does not deadlock), otherwise as an operation the poster waits for. An
// observer removed before its operation starts is not called; a nil queue means delivery on the
// posting thread.
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

    func testPostReturnsOnlyAfterTheQueuedBlockRan() {
        // Posted from a thread outside the queue: the block runs on the queue (a pool thread), and
        // post() returns after it, every time.
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.name = "observers"
        let ran = JudgedCounter()
        let onQueue = JudgedCounter()
        center.addObserver(forName: photoReady, object: nil, queue: queue) { _ in
            if TKOperationQueue.current === queue && !Thread.isMainThread { onQueue.add() }
            ran.add()
        }
        for i in 1...stress(200) {
            center.post(name: photoReady)
            XCTAssertEqual(ran.count, i, "post returned before its observer's block ran")
        }
        XCTAssertEqual(onQueue.count, stress(200))
    }

    func testASerialQueuesOperationPostingToItsOwnObserverRunsItInline() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.maxConcurrentOperationCount = 1
        let log = EventLog()
        center.addObserver(forName: photoReady, object: nil, queue: queue) { _ in log.append("observer") }
        let finished = DispatchSemaphore(value: 0)
        queue.addOperation {
            log.append("before post")
            center.post(name: photoReady) // would wait forever for a slot of this very queue
            log.append("after post")
            finished.signal()
        }
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success, "the post deadlocked")
        XCTAssertEqual(log.all, ["before post", "observer", "after post"])
    }

    func testObserversOnTheMainQueueRunOnTheMainThread() {
        let center = TKNotificationCenter()
        let onMain = Shared<Bool?>(nil) // written on the main thread, read there
        center.addObserver(forName: photoReady, object: nil, queue: .main) { _ in onMain.value = TKThread.isMainThread }
        // Posted on the main thread outside any operation: the main queue is the current one, so
        // the block runs inline, with no run loop turning.
        center.post(name: photoReady)
        XCTAssertEqual(onMain.value, true)
        onMain.value = nil
        // Posted from elsewhere: the poster waits until the main loop has run the block.
        let postReturned = Flag()
        TKDispatchQueue.global().async {
            center.post(name: photoReady)
            postReturned.set()
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !postReturned.isSet && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(50))
        }
        XCTAssertTrue(postReturned.isSet)
        XCTAssertEqual(onMain.value, true, "the post returned before the block ran on the main thread")
    }

    func testAnObserverRemovedBeforeItsOperationStartsIsNotCalled() {
        let center = TKNotificationCenter()
        let queue = TKOperationQueue()
        queue.isSuspended = true
        let calls = JudgedCounter()
        let token = center.addObserver(forName: photoReady, object: nil, queue: queue) { _ in calls.add() }
        let poster = Workers.start { center.post(name: photoReady) } // waits for the operation
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { queue.operationCount == 1 }, "the post added one operation")
        center.removeObserver(token)
        queue.isSuspended = false
        XCTAssertEqual(poster.wait(timeout: .now() + 30), .success)
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
        let thread = Shared<UInt32?>(nil) // written during post, on this thread
        center.addObserver(forName: photoReady, object: nil, queue: nil) { _ in thread.value = UInt32(KernelThread.currentID()) }
        center.post(name: photoReady)
        XCTAssertEqual(thread.value, UInt32(KernelThread.currentID()))
    }
}
