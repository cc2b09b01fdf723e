// The seeds' port and cross-thread scenarios as tests: AFNetworking's resident network thread,
// two threads exchanging work through custom sources, and a notification forwarded to the thread
// that registered for it (queue + lock + port). Judged by kernel thread ids, Mutex-guarded
// records and Foundation semaphores.
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

/// AFNetworking's networkRequestThread: started once, lazily, by whichever caller comes first.
private enum NetworkThread {
    static let starts = Atomic<Int>(0)
    private static let holder = Guarded<TKThread?>(nil)

    static var shared: TKThread {
        holder.withLock { thread in
            if let thread { return thread }
            let started = TKThread.detachNewThread(name: "AFNetworking") {
                starts.wrappingAdd(1, ordering: .relaxed)
                let loop = TKRunLoop.current
                loop.add(TKMessagePort(), forMode: .default)
                loop.run()
            }
            thread = started
            return started
        }
    }
}

final class PortScenarioTests: XCTestCase {
    func testTheResidentNetworkThreadIsStartedOnceAndServesRequestsFromManyThreads() throws {
        let requests = stress(1_000)
        let ranOn = Guarded<Set<Int32>>([])
        let count = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let callers = TestThread.spawn(4, "caller") { _ in
            for _ in 0..<requests {
                do {
                    try NetworkThread.shared.perform {
                        ranOn.withLock { _ = $0.insert(KernelThread.currentID()) }
                        if count.wrappingAdd(1, ordering: .relaxed).newValue == 4 * requests { done.signal() }
                    }
                } catch { XCTFail("\(error)") }
            }
        }
        XCTAssertTrue(joinAll(callers))
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(NetworkThread.starts.load(ordering: .relaxed), 1)
        XCTAssertEqual(ranOn.withLock { $0 }, [Int32(NetworkThread.shared.attributes.current.tid)])
        // The port keeps the loop running between requests: it is still there for the next one.
        XCTAssertTrue(NetworkThread.shared.isExecuting)
        try NetworkThread.shared.perform(waitUntilDone: true) {}
    }

    func testTwoThreadsPassWorkBackAndForthThroughCustomSources() {
        // The Threading Programming Guide's custom input source: each side signals the other's
        // source and wakes its loop; the secondary thread registers its source and loop with the
        // main side, as the guide's registerSource: does.
        let rounds = stress(10_000)
        let mainLoop = TKRunLoop.current
        let registered = Guarded<(TKRunLoopSource, TKRunLoop)?>(nil)
        let secondarySeen = Atomic<Int>(0)
        let mainSeen = Atomic<Int>(0)
        let mainTID = KernelThread.currentID()
        let wrongThread = Atomic<Int>(0)
        let mainSource = TKRunLoopSource {
            if KernelThread.currentID() != mainTID { wrongThread.wrappingAdd(1, ordering: .relaxed) }
            guard mainSeen.wrappingAdd(1, ordering: .relaxed).newValue < rounds, let (source, loop) = registered.withLock({ $0 }) else {
                return
            }
            source.signal()
            loop.wakeUp()
        }
        mainLoop.add(mainSource, forMode: .default)
        defer { mainLoop.remove(mainSource, forMode: .default) }
        let finished = Flag()
        let secondary = TestThread("secondary") {
            let loop = TKRunLoop.current
            let source = TKRunLoopSource {
                secondarySeen.wrappingAdd(1, ordering: .relaxed)
                mainSource.signal()
                mainLoop.wakeUp()
            }
            loop.add(source, forMode: .default)
            registered.withLock { $0 = (source, loop) }
            source.signal() // the first round starts on this side
            while !finished.isSet { _ = loop.run(mode: .default, before: .now + .milliseconds(100)) }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while mainSeen.load(ordering: .relaxed) < rounds && ContinuousClock.now < deadline {
            _ = mainLoop.run(mode: .default, before: .now + .milliseconds(100))
        }
        XCTAssertEqual(mainSeen.load(ordering: .relaxed), rounds)
        finished.set()
        registered.withLock { $0?.1.wakeUp() }
        XCTAssertTrue(secondary.join())
        XCTAssertEqual(secondarySeen.load(ordering: .relaxed), rounds)
        XCTAssertEqual(mainSeen.load(ordering: .relaxed), rounds)
        XCTAssertEqual(wrongThread.load(ordering: .relaxed), 0)
    }

    func testANotificationPostedInTheBackgroundIsHandledOnTheRegisteringThread() {
        /// The guide's forwarder: notifications arriving on other threads are queued under a lock
        /// and the registering thread's port is poked; its delegate drains the queue.
        final class Forwarder: TKPortDelegate, @unchecked Sendable {
            let tid = KernelThread.currentID()
            let port = TKMessagePort()
            let lock = TKLock()
            var pending: [TKNotification] = [] // guarded by lock
            let handled = Guarded<[(String, Int32)]>([])

            init() {
                port.delegate = self
                TKRunLoop.current.add(port, forMode: .common)
            }

            func process(_ notification: TKNotification) {
                if KernelThread.currentID() != tid {
                    lock.withLock { pending.append(notification) }
                    XCTAssertTrue(TKPortMessage(sendPort: port, receivePort: nil, components: []).send(before: .now + .seconds(30)))
                    return
                }
                handled.withLock { $0.append((notification.name.rawValue, KernelThread.currentID())) }
            }

            func handlePortMessage(_ message: TKPortMessage) {
                while let next = lock.withLock({ pending.isEmpty ? nil : pending.removeFirst() }) { process(next) }
            }
        }
        let forwarder = Forwarder()
        defer { TKRunLoop.current.remove(forwarder.port, forMode: .common) }
        let center = TKNotificationCenter()
        let token = center.addObserver(forName: nil, object: nil) { forwarder.process($0) }
        defer { center.removeObserver(token) }
        let count = 100
        let poster = TestThread("background") {
            for i in 0..<count { center.post(name: TKNotification.Name(rawValue: "n\(i)")) }
        }
        XCTAssertTrue(poster.join())
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) {
                _ = TKRunLoop.current.run(mode: .default, before: .now + .milliseconds(100))
                return forwarder.handled.withLock { $0.count } == count
            })
        let handled = forwarder.handled.withLock { $0 }
        XCTAssertEqual(handled.map(\.0), (0..<count).map { "n\($0)" })
        XCTAssertTrue(handled.allSatisfy { $0.1 == forwarder.tid })
    }
}
