// TKTrace: the recorder and its exports. Work is driven by ThreadKit and judged independently: the
// Chrome JSON is parsed by Foundation's JSONSerialization and checked by `TraceJudge` (every B has
// its E on the same thread, in nesting order; timestamps never go back on a thread; every thread
// named); a lock's contention is made certain by watching the waiter park in /proc; the HTML page
// is rendered by headless Chromium (TraceRenderingTests).
import Foundation
import XCTest

@testable import ThreadKit

/// Checks a Chrome trace-event JSON document; returns its events, failing the test on each fault.
enum TraceJudge {
    static func events(_ json: String, file: StaticString = #filePath, line: UInt = #line) -> [[String: Any]] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
            let events = object["traceEvents"] as? [[String: Any]]
        else {
            XCTFail("not a trace-event JSON object", file: file, line: line)
            return []
        }
        var named = Set<Int>()
        var used = Set<Int>()
        var open: [Int: [String]] = [:]
        var last: [Int: Double] = [:]
        var flowStarts = Set<Int>()
        var flowEnds = Set<Int>()
        for event in events {
            guard let ph = event["ph"] as? String, let tid = event["tid"] as? Int, event["pid"] is Int else {
                XCTFail("event without ph/pid/tid: \(event)", file: file, line: line)
                continue
            }
            if ph == "M" {
                if event["name"] as? String == "thread_name" { named.insert(tid) }
                continue
            }
            guard let ts = event["ts"] as? Double else {
                XCTFail("event without a numeric ts: \(event)", file: file, line: line)
                continue
            }
            used.insert(tid)
            if let previous = last[tid], ts < previous {
                XCTFail("ts goes back on thread \(tid): \(previous) then \(ts) (\(event))", file: file, line: line)
            }
            last[tid] = ts
            let name = event["name"] as? String ?? ""
            switch ph {
            case "B": open[tid, default: []].append(name)
            case "E":
                guard let top = open[tid]?.popLast() else {
                    XCTFail("E without a B on thread \(tid): \(event)", file: file, line: line)
                    continue
                }
                XCTAssertEqual(top, name, "E closes a different span on thread \(tid)", file: file, line: line)
            case "i": XCTAssertEqual(event["s"] as? String, "t", file: file, line: line)
            case "s": flowStarts.insert(event["id"] as? Int ?? -1)
            case "f": flowEnds.insert(event["id"] as? Int ?? -1)
            default: XCTFail("unexpected phase \(ph)", file: file, line: line)
            }
        }
        for (tid, spans) in open where !spans.isEmpty {
            XCTFail("thread \(tid) has B without E: \(spans)", file: file, line: line)
        }
        XCTAssertEqual(used.subtracting(named), [], "threads without a thread_name", file: file, line: line)
        XCTAssertEqual(flowStarts, flowEnds, "flows must start and finish in the trace", file: file, line: line)
        return events
    }

    static func spans(_ events: [[String: Any]], category: String) -> [[String: Any]] {
        events.filter { $0["ph"] as? String == "B" && $0["cat"] as? String == category }
    }
}

/// The work both the JSON and the HTML tests record: a named TKThread running a run loop that
/// receives port messages, dispatch items on a serial queue, a contended TKLock, operations.
enum TracedWork {
    static let items = 12

    static func run() throws {
        // A run loop thread receiving three port messages.
        let worker = LoopThread(name: "trace-loop")
        let port = TKMessagePort()
        let collector = PortCollector()
        port.delegate = collector
        worker.loop.add(port, forMode: .default)
        // Asleep first, so the first message is seen through beforeWaiting and afterWaiting.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { worker.loop.isWaiting }, "the loop never slept")
        for id in 1...3 { XCTAssertTrue(sendMessage(port, UInt32(id), [UInt8(id)])) }
        for _ in 1...3 { XCTAssertEqual(collector.arrivals.wait(timeout: .now() + 30), .success) }
        worker.finish()

        // Dispatch items on a serial queue, judged by a Foundation group.
        let queue = TKDispatchQueue(label: "trace.serial", qos: .utility)
        let done = DispatchGroup()
        for _ in 0..<items {
            done.enter()
            queue.async { done.leave() }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)

        // A lock the second thread must wait for: the holder lets go only once /proc shows the
        // waiter parked in the futex.
        let lock = TKLock()
        lock.name = "trace.lock"
        lock.lock()
        let waiter = TestThread("trace-waiter") {
            lock.lock()
            lock.unlock()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { waiter.isParked }, "the waiter never parked")
        lock.unlock()
        XCTAssertTrue(waiter.join())

        // Three operations, the last depending on the first two.
        let operations = TKOperationQueue()
        let a = TKBlockOperation {}
        let b = TKBlockOperation {}
        let c = TKBlockOperation {}
        a.name = "op.a"
        b.name = "op.b"
        c.name = "op.c"
        try c.addDependency(a)
        try c.addDependency(b)
        operations.addOperations([c, a, b], waitUntilFinished: true)
        XCTAssertTrue(c.isFinished)
    }
}

final class TraceTests: XCTestCase {
    override func tearDown() {
        TKTrace.stop()
        super.tearDown()
    }

    func testTheChromeJSONHoldsEveryKindOfEventPairedAndInOrder() throws {
        TKTrace.start(capacity: 8192)
        try TracedWork.run()
        TKTrace.stop()
        let events = TraceJudge.events(TKTrace.chromeJSON())

        let threadNames = events.filter { $0["name"] as? String == "thread_name" }
            .compactMap { ($0["args"] as? [String: Any])?["name"] as? String }
        XCTAssertTrue(threadNames.contains("trace-loop"), "\(threadNames)")
        XCTAssertTrue(TraceJudge.spans(events, category: "thread").contains { $0["name"] as? String == "trace-loop" })

        let items = TraceJudge.spans(events, category: "dispatch item").filter { $0["name"] as? String == "trace.serial" }
        XCTAssertEqual(items.count, TracedWork.items)
        XCTAssertEqual(Set(items.compactMap { ($0["args"] as? [String: Any])?["qos"] as? String }), ["utility"])
        let enqueues = events.filter { $0["cat"] as? String == "enqueue" && $0["name"] as? String == "enqueue → trace.serial" }
        XCTAssertEqual(enqueues.count, TracedWork.items)
        XCTAssertGreaterThanOrEqual(events.filter { $0["ph"] as? String == "f" }.count, TracedWork.items)

        XCTAssertTrue(TraceJudge.spans(events, category: "lock wait").contains { $0["name"] as? String == "wait trace.lock" })

        let operations = Set(TraceJudge.spans(events, category: "operation").compactMap { $0["name"] as? String })
        XCTAssertTrue(operations.isSuperset(of: ["op.a", "op.b", "op.c"]), "\(operations)")
        XCTAssertTrue(events.contains { $0["name"] as? String == "ready op.c" })

        XCTAssertEqual(events.filter { $0["cat"] as? String == "port send" }.count, 3)
        let handled = TraceJudge.spans(events, category: "port message").compactMap { $0["name"] as? String }
        XCTAssertEqual(handled, ["message 1", "message 2", "message 3"])

        XCTAssertFalse(TraceJudge.spans(events, category: "run-loop pass").isEmpty)
        XCTAssertFalse(TraceJudge.spans(events, category: "sleep").isEmpty)
        let phases = Set(events.filter { $0["cat"] as? String == "run-loop phase" }.compactMap { $0["name"] as? String })
        XCTAssertTrue(phases.isSuperset(of: ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting"]), "\(phases)")
    }

    func testAWrappedRingKeepsTheLatestEventsAndStillExportsPairedSpans() {
        TKTrace.start(capacity: 64)
        let count = 1_000
        let recorded = TestThread("trace-wrap") {
            for i in 0..<count { TKTrace.mark("m\(i % 10)") }
        }
        XCTAssertTrue(recorded.join())
        TKTrace.stop()
        guard let mine = TKTrace.threads.first(where: { $0.threadID == UInt32(recorded.kernelID) }) else {
            return XCTFail("the thread's ring is missing")
        }
        // A ring of 64 slots exports its latest 63 events: the slot the writer fills next is never
        // read (it may be half written).
        XCTAssertEqual(mine.events.count, 63)
        XCTAssertEqual(mine.overwritten, UInt64(count - 63))
        XCTAssertEqual(mine.events.last?.name, "m9")
        XCTAssertTrue(mine.events.allSatisfy { $0.kind == .mark })
        _ = TraceJudge.events(TKTrace.chromeJSON())
    }

    func testSnapshotsTakenWhileThreadsRecordAndWrapAreNeverTorn() {
        TKTrace.start(capacity: 256)
        let writers = 3
        let rounds = stress(200)
        let stop = Flag()
        let threads = TestThread.spawn(writers, "trace-writer") { index in
            // Each writer marks with its own name until told to stop: a torn slot would show
            // another writer's name, a kind other than mark, or time going back.
            let name = "writer \(index)"
            while !stop.isSet { TKTrace.mark(name) }
        }
        // Foundation threads do not pass their names to the OS on Linux: know them by kernel id.
        let writerOf = Dictionary(uniqueKeysWithValues: threads.enumerated().map { (UInt32($1.kernelID), $0) })
        // Every writer has recorded before the rounds start (on a loaded machine a thread may
        // start late), so that each round sees every writer's ring.
        let started = waitUntil(.now + .seconds(60)) { Set(TKTrace.threads.map(\.threadID)).isSuperset(of: writerOf.keys) }
        XCTAssertTrue(started, "the writers never recorded")
        var checked = 0
        for _ in 0..<rounds {
            for thread in TKTrace.threads {
                guard let index = writerOf[thread.threadID] else { continue }
                checked += 1
                let expected = "writer \(index)"
                XCTAssertLessThanOrEqual(thread.events.count, 255)
                for (a, b) in zip(thread.events, thread.events.dropFirst()) where a.timestamp > b.timestamp {
                    XCTFail("time goes back in a snapshot: \(a.timestamp) then \(b.timestamp)")
                }
                let strangers = thread.events.filter { $0.kind != .mark || $0.name != expected }
                XCTAssertTrue(strangers.isEmpty, "torn or foreign events on \(thread.name): \(strangers.prefix(3))")
            }
        }
        stop.set()
        XCTAssertTrue(joinAll(threads))
        TKTrace.stop()
        XCTAssertGreaterThan(checked, rounds, "the writers' rings were not seen while they recorded")
    }

    func testNothingIsRecordedWhileStoppedAndANewSessionForgetsTheOldOne() {
        TKTrace.start()
        TKTrace.mark("first session")
        TKTrace.stop()
        TKTrace.mark("while stopped")
        XCTAssertTrue(TKTrace.events.contains { $0.name == "first session" })
        XCTAssertFalse(TKTrace.events.contains { $0.name == "while stopped" })
        TKTrace.start()
        TKTrace.mark("second session")
        TKTrace.stop()
        let names = TKTrace.events.compactMap(\.name)
        XCTAssertTrue(names.contains("second session"))
        XCTAssertFalse(names.contains("first session"))
    }

    func testEndsWhoseBeginsWereNotRecordedAreDroppedAndOpenSpansClosed() {
        let t = UInt32(7)
        func e(_ time: UInt64, _ kind: TKTraceEvent.Kind, _ phase: TKTraceEvent.Phase, _ object: UInt64) -> TKTraceEvent {
            TKTraceEvent(timestamp: time, threadID: t, kind: kind, phase: phase, name: "x", object: object, argument: 0, detail: 0)
        }
        // An end from before the ring's window, an inner span left open when the outer one ends,
        // and an outer span still open at the end of the trace.
        let thread = TKTraceThread(
            threadID: t, name: "t",
            events: [
                e(10, .lockWait, .end, 1),
                e(20, .dispatchItem, .begin, 2), e(30, .lockWait, .begin, 3), e(40, .dispatchItem, .end, 2),
                e(50, .operation, .begin, 4), e(60, .mark, .instant, 0),
            ], overwritten: 3)
        let events = TraceJudge.events(TraceChromeJSON.render(TraceTimeline([thread])))
        let phases = events.filter { $0["tid"] as? Int == 7 && $0["ph"] as? String != "M" }.map { $0["ph"] as! String }
        XCTAssertEqual(phases, ["B", "B", "E", "E", "B", "i", "E"])
    }

    func testWritingToAMissingDirectoryThrowsNamingThePath() {
        XCTAssertThrowsError(try TKTrace.writeChromeJSON(to: "/nonexistent-dir/trace.json")) { error in
            XCTAssertTrue("\(error)".contains("/nonexistent-dir/trace.json"), "\(error)")
        }
    }
}
