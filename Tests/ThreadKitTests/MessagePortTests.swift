// TKMessagePort: a version-1 source within one process. Delivery is judged by the delegate's own
// record under a Synchronization.Mutex and by Foundation semaphores, never by the port itself.
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

/// Records what its port delivers: message ids, components and the delivering thread.
final class PortCollector: TKPortDelegate {
    struct Received {
        let msgid: UInt32
        let data: [UInt8]
        let thread: Int32
        let message: TKPortMessage
    }
    let received = Guarded<[Received]>([])
    let arrivals = DispatchSemaphore(value: 0)
    let onMessage: (@Sendable (TKPortMessage) -> Void)?

    init(onMessage: (@Sendable (TKPortMessage) -> Void)? = nil) { self.onMessage = onMessage }

    func handlePortMessage(_ message: TKPortMessage) {
        var data: [UInt8] = []
        for case .data(let bytes) in message.components { data += bytes }
        let entry = Received(msgid: message.msgid, data: data, thread: KernelThread.currentID(), message: message)
        received.withLock { $0.append(entry) }
        onMessage?(message)
        arrivals.signal()
    }

    var count: Int { received.withLock { $0.count } }
    var ids: [UInt32] { received.withLock { $0.map(\.msgid) } }
}

func sendMessage(
    _ port: TKPort, _ msgid: UInt32, _ data: [UInt8] = [], replyTo: TKPort? = nil,
    before deadline: ContinuousClock.Instant = .now + .seconds(30)
) -> Bool {
    let message = TKPortMessage(sendPort: port, receivePort: replyTo, components: data.isEmpty ? [] : [.data(data)])
    message.msgid = msgid
    return message.send(before: deadline)
}

final class MessagePortTests: XCTestCase {
    func testAMessageWakesTheSleepingLoopAndTheDelegateRunsOnItsThread() {
        let worker = LoopThread()
        defer { worker.finish() }
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        worker.loop.add(port, forMode: .default)
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting }, "the loop never slept")
        XCTAssertTrue(sendMessage(port, 7, [1, 2, 3]))
        XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success, "the message did not wake the loop")
        let got = collector.received.withLock { $0 }
        XCTAssertEqual(got.map(\.msgid), [7])
        XCTAssertEqual(got.first?.data, [1, 2, 3])
        XCTAssertEqual(got.first.map { UInt32($0.thread) }, worker.thread.attributes.current.tid)
        XCTAssertTrue(got.first?.message.receivePort === port)
        XCTAssertNil(got.first?.message.sendPort)
    }

    func testMessagesSentWhileTheLoopIsNotRunningAreKeptAndDeliveredInOrder() {
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        for i in 0..<100 { XCTAssertTrue(sendMessage(port, UInt32(i))) }
        XCTAssertEqual(port.queuedMessageCount, 100)
        let loop = TKRunLoop.current
        loop.add(port, forMode: .default)
        defer { loop.remove(port, forMode: .default) }
        XCTAssertTrue(loop.run(mode: .default, before: .now + .seconds(30)), "a port keeps the mode alive")
        XCTAssertEqual(collector.ids, (0..<100).map(UInt32.init))
        XCTAssertEqual(port.queuedMessageCount, 0)
    }

    func testRunBeforeReturnsAfterHandlingAPortMessage() {
        let loop = TKRunLoop.current
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        loop.add(port, forMode: .default)
        defer { loop.remove(port, forMode: .default) }
        let sender = TestThread { _ = sendMessage(port, 42) }
        let start = ContinuousClock.now
        XCTAssertEqual(loop.run(mode: .default, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(29))
        XCTAssertEqual(collector.ids, [42])
        XCTAssertTrue(sender.join())
    }

    func testAPortKeepsItsModeAliveUntilRemovedOrInvalidated() {
        let loop = TKRunLoop.current
        let port = TKMessagePort()
        loop.add(port, forMode: "ports")
        XCTAssertEqual(loop.run(mode: "ports", for: .zero, returnAfterSourceHandled: false), .timedOut)
        loop.remove(port, forMode: "ports")
        XCTAssertEqual(loop.run(mode: "ports", for: .seconds(30), returnAfterSourceHandled: false), .finished)
        loop.add(port, forMode: "ports")
        port.invalidate()
        XCTAssertEqual(loop.run(mode: "ports", for: .seconds(30), returnAfterSourceHandled: false), .finished)
        loop.add(port, forMode: "ports") // an invalid port is not added
        XCTAssertEqual(loop.run(mode: "ports", for: .seconds(30), returnAfterSourceHandled: false), .finished)
    }

    func testMessagesWaitForADelegate() {
        let worker = LoopThread()
        defer { worker.finish() }
        let port = TKMessagePort()
        worker.loop.add(port, forMode: .default)
        for i in 0..<3 { XCTAssertTrue(sendMessage(port, UInt32(i))) }
        let collector = PortCollector()
        port.delegate = collector
        for _ in 0..<3 { XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(collector.ids, [0, 1, 2])
    }

    func testFourProducersEachKeepTheirOrderAndNothingIsLost() {
        let worker = LoopThread()
        defer { worker.finish() }
        let perProducer = stress(100_000)
        let port = TKMessagePort(queueLimit: 1_024) // small: producers also wait for room
        let lastSeen = Guarded<[Int]>([-1, -1, -1, -1])
        let outOfOrder = Atomic<Int>(0)
        let total = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let expected = 4 * perProducer
        let collector = PortCollector { message in
            let producer = Int(message.msgid >> 24)
            let sequence = Int(message.msgid & 0xFF_FFFF)
            lastSeen.withLock { seen in
                if seen[producer] + 1 != sequence { outOfOrder.wrappingAdd(1, ordering: .relaxed) }
                seen[producer] = sequence
            }
            if total.wrappingAdd(1, ordering: .relaxed).newValue == expected { done.signal() }
        }
        port.delegate = collector
        worker.loop.add(port, forMode: .default)
        let refused = Atomic<Int>(0)
        let producers = TestThread.spawn(4, "producer") { p in
            for i in 0..<perProducer where !sendMessage(port, UInt32(p << 24 | i)) {
                refused.wrappingAdd(1, ordering: .relaxed)
            }
        }
        XCTAssertTrue(joinAll(producers, until: .now + .seconds(120)))
        XCTAssertEqual(refused.load(ordering: .relaxed), 0)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "received \(total.load(ordering: .relaxed)) of \(expected)")
        XCTAssertEqual(collector.count, expected)
        XCTAssertEqual(outOfOrder.load(ordering: .relaxed), 0)
        XCTAssertEqual(lastSeen.withLock { $0 }, Array(repeating: perProducer - 1, count: 4))
    }

    func testAFullQueueMakesSendWaitUntilTheDeadlineThenFail() {
        let port = TKMessagePort(queueLimit: 2)
        XCTAssertTrue(sendMessage(port, 1))
        XCTAssertTrue(sendMessage(port, 2))
        let start = ContinuousClock.now
        let message = TKPortMessage(sendPort: port, receivePort: nil, components: [])
        XCTAssertFalse(message.send(before: start + .milliseconds(50)))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(50), "gave up early")
        XCTAssertNotNil(message.failureReason)
        XCTAssertEqual(port.queuedMessageCount, 2, "nothing dropped")
    }

    func testASenderWaitingForRoomProceedsWhenTheLoopDrains() {
        let port = TKMessagePort(queueLimit: 1)
        let collector = PortCollector()
        port.delegate = collector
        XCTAssertTrue(sendMessage(port, 1))
        let sent = Flag()
        let sender = TestThread {
            if sendMessage(port, 2) { sent.set() }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { sender.isParked }, "the sender should wait for room")
        XCTAssertFalse(sent.isSet)
        let loop = TKRunLoop.current
        loop.add(port, forMode: .default)
        defer { loop.remove(port, forMode: .default) }
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) {
                _ = loop.run(mode: .default, before: .now + .milliseconds(10))
                return collector.count == 2
            })
        XCTAssertTrue(sender.join())
        XCTAssertEqual(collector.ids, [1, 2])
    }

    func testAnInvalidPortRefusesAndInvalidationIsPostedAndFreesWaitingSenders() {
        let port = TKMessagePort(queueLimit: 1)
        let posted = Guarded<Int>(0)
        let token = TKNotificationCenter.default.addObserver(forName: TKPort.didBecomeInvalidNotification, object: port) { note in
            if note.object === port { posted.withLock { $0 += 1 } }
        }
        defer { TKNotificationCenter.default.removeObserver(token) }
        XCTAssertTrue(sendMessage(port, 1))
        let result = Guarded<Bool?>(nil)
        let sender = TestThread {
            let ok = sendMessage(port, 2)
            result.withLock { $0 = ok }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { sender.isParked })
        port.invalidate()
        XCTAssertTrue(sender.join())
        XCTAssertEqual(result.withLock { $0 }, false)
        XCTAssertFalse(port.isValid)
        XCTAssertEqual(posted.withLock { $0 }, 1)
        port.invalidate()
        XCTAssertEqual(posted.withLock { $0 }, 1, "posted once")
        let refused = TKPortMessage(sendPort: port, receivePort: nil, components: [])
        XCTAssertFalse(refused.send(before: .now + .seconds(30)))
        XCTAssertNotNil(refused.failureReason)
        XCTAssertFalse(TKPortMessage(sendPort: nil, receivePort: port, components: []).send(before: .now))
    }

    func testTheReceiverRepliesThroughTheSendersReceivePort() {
        // The seed's msgid 1000: a secondary thread checks in with its own port as the reply port;
        // the main side answers through the received message's sendPort.
        let mainPort = TKMessagePort()
        let loop = TKRunLoop.current
        let mainSide = PortCollector { message in
            guard message.msgid == 1000, let reply = message.sendPort else { return }
            let answer = TKPortMessage(sendPort: reply, receivePort: message.receivePort, components: [.data(Array("ok".utf8))])
            answer.msgid = 1001
            _ = answer.send(before: .now + .seconds(30))
        }
        mainPort.delegate = mainSide
        loop.add(mainPort, forMode: .default)
        defer { loop.remove(mainPort, forMode: .default) }
        let answered = Guarded<[UInt8]>([])
        let secondary = TestThread {
            let ownPort = TKMessagePort()
            let ownSide = PortCollector { message in
                if case .data(let bytes)? = message.components.first { answered.withLock { $0 = bytes } }
            }
            ownPort.delegate = ownSide
            TKRunLoop.current.add(ownPort, forMode: .default)
            _ = sendMessage(mainPort, 1000, replyTo: ownPort)
            _ = TKRunLoop.current.run(mode: .default, before: .now + .seconds(30))
        }
        _ = loop.run(mode: .default, before: .now + .seconds(30))
        XCTAssertTrue(secondary.join())
        XCTAssertEqual(mainSide.ids, [1000])
        XCTAssertEqual(answered.withLock { $0 }, Array("ok".utf8))
    }
}
