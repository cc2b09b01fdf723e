// Swift tasks and signposts in the trace (docs/DiagnosticsTrace.md §9–10): a task's jobs on a
// serial TKDispatchQueue (as its task executor) and on a TKRunLoop (an actor's executor) appear as
// `task` spans with the task's id, priority and executor, each with an enqueue → start flow, and a
// task resumed from a ThreadKit continuation (AsyncWaiters) gets a flow from the resuming thread;
// the spans lie where the task's own code ran (its marks, recorded from inside it, fall inside
// them, on the same thread). Intervals nest as spans and counters become "C" events; the HTML
// timeline, rendered by headless Chromium, draws the task rows and the counter rows.
import Foundation
import XCTest

@testable import ThreadKit

/// An actor whose executor is a run loop's thread.
private actor LoopActor {
    let loop: TKRunLoop
    init(loop: TKRunLoop) { self.loop = loop }
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    func work() { TKTrace.mark("on-the-loop") }
}

final class TraceTaskTests: XCTestCase {
    override func tearDown() {
        TKTrace.stop()
        super.tearDown()
    }

    /// The events of the thread whose id is `tid`.
    private func events(of tid: UInt32, in threads: [TKTraceThread]) -> [TKTraceEvent] {
        threads.first { $0.threadID == tid }?.events ?? []
    }

    func testATaskOnASerialQueueShowsItsIdPriorityFlowsAndItsResumeFromAContinuation() throws {
        TKTrace.start(capacity: 8192)
        let queue = TKDispatchQueue(label: "tasks.serial")
        let waiters = AsyncWaiters<Int>()
        let done = DispatchSemaphore(value: 0)
        Task(executorPreference: queue, priority: .high) {
            TKTrace.mark("first-job")
            let value = try? await waiters.wait()
            TKTrace.mark("second-job \(value ?? -1)")
            done.signal()
        }
        // The task is suspended in the waiters' list: resume it from this thread.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { waiters.count == 1 }, "the task never suspended")
        let resumer = SystemCall.currentThreadID
        XCTAssertTrue(waiters.resumeFirst(returning: 7))
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        TKTrace.stop()

        let threads = TKTrace.threads
        let all = threads.flatMap(\.events)
        let begins = all.filter { $0.kind == .task && $0.phase == .begin && $0.name == "tasks.serial" }
        // At least a job before the await and one after (the runtime may hop more often: each
        // switch between the queue as serial and as task executor is a job of its own).
        XCTAssertGreaterThanOrEqual(begins.count, 2, "a job before the await and one after")
        let task = try XCTUnwrap(begins.first?.object)
        XCTAssertNotEqual(task, 0, "no task id")
        XCTAssertEqual(Set(begins.map(\.object)), [task], "every job belongs to the one task")
        XCTAssertEqual(Set(begins.map(\.detail)), [TaskPriority.high.rawValue])
        // Each mark lies inside a job of the task, on the job's thread.
        for mark in ["first-job", "second-job 7"] {
            let owner = try XCTUnwrap(threads.first { $0.events.contains { $0.name == mark } }, "\(mark) not recorded")
            let time = owner.events.first { $0.name == mark }!.timestamp
            let jobs = TraceTimeline.row(owner).spans.filter { $0.kind == .task && $0.object == task }
            XCTAssertTrue(jobs.contains { $0.start <= time && time <= $0.end }, "\(mark) outside the task's jobs")
        }
        // One enqueue per job, each before it (the first on this thread, which created the task);
        // the resume on the resuming thread, before the job after the await.
        let enqueues = all.filter { $0.kind == .taskEnqueue && $0.object == task }
        XCTAssertEqual(enqueues.count, begins.count, "one enqueue per job")
        XCTAssertTrue(enqueues.allSatisfy { $0.name == "tasks.serial" && $0.detail == TaskPriority.high.rawValue })
        XCTAssertLessThanOrEqual(enqueues.map(\.timestamp).min() ?? .max, begins.map(\.timestamp).min() ?? 0)
        let resumes = all.filter { $0.kind == .taskResume && $0.object == task }
        XCTAssertEqual(resumes.map(\.threadID), [resumer], "the resume is recorded on the thread that resumed")
        let secondMark = all.first { $0.name == "second-job 7" }!.timestamp
        XCTAssertLessThan(resumes.first?.timestamp ?? .max, secondMark)

        // The Chrome JSON: an enqueue → start flow into every job and one resume → start flow,
        // leaving from the resuming thread; every flow ends on a job's thread.
        let json = TraceJudge.events(TKTrace.chromeJSON())
        let starts = json.filter { $0["ph"] as? String == "s" && $0["cat"] as? String == "task flow" }
        let finishes = json.filter { $0["ph"] as? String == "f" && $0["cat"] as? String == "task flow" }
        XCTAssertEqual(starts.count, begins.count + 1)
        XCTAssertEqual(Set(starts.compactMap { $0["id"] as? Int }), Set(finishes.compactMap { $0["id"] as? Int }))
        XCTAssertEqual(Set(finishes.compactMap { $0["tid"] as? Int }), Set(begins.map { Int($0.threadID) }))
        XCTAssertTrue(starts.contains { $0["tid"] as? Int == Int(resumer) })
        let spans = TraceJudge.spans(json, category: "task").filter { $0["name"] as? String == "task \(task)" }
        XCTAssertEqual(spans.count, begins.count)
        let args = spans.compactMap { $0["args"] as? [String: String] }
        XCTAssertEqual(Set(args.map { $0["priority"] }), ["high"])
        XCTAssertEqual(Set(args.map { $0["executor"] }), ["tasks.serial"])
    }

    func testAnActorOnARunLoopRunsItsJobsAsTaskSpansOnTheLoopThread() throws {
        let worker = LoopThread(name: "actor-loop")
        defer { worker.finish() }
        let actor = LoopActor(loop: worker.loop)
        TKTrace.start(capacity: 8192)
        let done = DispatchSemaphore(value: 0)
        Task(priority: .low) {
            await actor.work()
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        TKTrace.stop()
        let threads = TKTrace.threads
        let loopRow = try XCTUnwrap(threads.first { $0.name == "actor-loop" })
        let begin = try XCTUnwrap(loopRow.events.first { $0.kind == .task && $0.phase == .begin })
        XCTAssertEqual(begin.name, "TKRunLoop")
        XCTAssertNotEqual(begin.object, 0)
        XCTAssertEqual(begin.detail, TaskPriority.low.rawValue)
        let mark = try XCTUnwrap(loopRow.events.first { $0.name == "on-the-loop" })
        XCTAssertGreaterThanOrEqual(mark.timestamp, begin.timestamp)
        let enqueue = try XCTUnwrap(threads.flatMap(\.events).first { $0.kind == .taskEnqueue && $0.object == begin.object })
        XCTAssertNotEqual(enqueue.threadID, loopRow.threadID, "enqueued from the caller's thread")
        XCTAssertLessThanOrEqual(enqueue.timestamp, begin.timestamp)
        let json = TraceJudge.events(TKTrace.chromeJSON())
        let finish = json.filter { $0["ph"] as? String == "f" && $0["cat"] as? String == "task flow" }
        XCTAssertTrue(finish.contains { $0["tid"] as? Int == Int(loopRow.threadID) }, "no enqueue → start flow into the loop's job")
    }

    func testIntervalsNestAndCountersBecomeCounterEvents() throws {
        TKTrace.start(capacity: 4096)
        let outer = TKTrace.beginInterval("request")
        let result = TKTrace.interval("load") { TKTrace.interval("parse") { 42 } }
        XCTAssertEqual(result, 42)
        XCTAssertThrowsError(try TKTrace.interval("failing") { () throws -> Int in throw CancellationError() })
        for depth in [1.0, 3.0, 2.5] { TKTrace.counter("queue depth", depth) }
        TKTrace.counter("queue depth", .nan) // left out of the exports
        outer.end()
        TKTrace.stop()
        let off = TKTrace.beginInterval("not recorded")
        XCTAssertEqual(off.id, 0)
        off.end()

        let text = TKTrace.chromeJSON()
        XCTAssertNotNil(try JSONSerialization.jsonObject(with: Data(text.utf8)))
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])["traceEvents"] as? [[String: Any]]
        let mine = (json ?? []).filter { $0["tid"] as? Int == Int(SystemCall.currentThreadID) }
        let intervals = mine.filter { $0["cat"] as? String == "interval" }.map { "\($0["ph"]!) \($0["name"]!)" }
        XCTAssertEqual(
            intervals,
            ["B request", "B load", "B parse", "E parse", "E load", "B failing", "E failing", "E request"])
        let counters = mine.filter { $0["ph"] as? String == "C" }
        XCTAssertEqual(counters.compactMap { $0["name"] as? String }, ["queue depth", "queue depth", "queue depth"])
        XCTAssertEqual(counters.compactMap { ($0["args"] as? [String: Any])?["value"] as? Double }, [1.0, 3.0, 2.5])
        let recorded = TKTrace.events.filter { $0.kind == .counter }
        XCTAssertEqual(recorded.count, 4)
        XCTAssertTrue(recorded.last?.counterValue?.isNaN ?? false)
    }

    func testTheHTMLTimelineDrawsTaskRowsAndCounterRowsInHeadlessChromium() throws {
        let chromium = try Chromium.locate()
        TKTrace.start(capacity: 8192)
        let queue = TKDispatchQueue(label: "html.tasks")
        let done = DispatchSemaphore(value: 0)
        for index in 0..<3 {
            Task(executorPreference: queue, priority: .medium) {
                TKTrace.counter("in flight", Double(index))
                done.signal()
            }
        }
        for _ in 0..<3 { XCTAssertEqual(done.wait(timeout: .now() + 30), .success) }
        TKTrace.counter("other", 1)
        TKTrace.stop()
        let tasks = Set(TKTrace.events.filter { $0.kind == .task && $0.name == "html.tasks" }.map(\.object))
        XCTAssertEqual(tasks.count, 3)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tk-trace-tasks-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let page = directory.appendingPathComponent("tasks.html").path
        try TKTrace.writeHTML(to: page, title: "tasks")
        let dom = try chromium.run(["--dump-dom", "file://" + page], profile: directory.appendingPathComponent("profile").path)
        XCTAssertEqual(attribute("data-task-rows", in: dom), "\(tasks.count)")
        for task in tasks { XCTAssertTrue(dom.contains("data-task=\"\(task)\""), "no row for task \(task)") }
        XCTAssertEqual(attribute("data-counter-rows", in: dom), "2")
        XCTAssertTrue(dom.contains("data-counter=\"in flight\""))
        XCTAssertTrue(dom.contains("data-counter=\"other\""))
        // Judged against the page's own rows: a thread may still add its last event after stop().
        let rows = try TracePage.rows(ofPageAt: page)
        XCTAssertEqual(attribute("data-rows", in: dom), "\(rows.count)", "one thread row per thread, as before")
    }

    private func attribute(_ name: String, in dom: String) -> String? {
        guard let start = dom.range(of: "\(name)=\"") else { return nil }
        return String(dom[start.upperBound...].prefix { $0 != "\"" })
    }
}
