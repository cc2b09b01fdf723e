// swift-format-ignore-file
// (The examples below are compared character for character with the DocC articles: no reformatting.)
// DocumentationTests: the documentation's code is code that runs. Every ```swift block of an
// article in Sources/ThreadKit/ThreadKit.docc is a region of this file, between a
// `// docs:begin ARTICLE` line and a `// docs:end` line (compared after removing the marker's
// indentation), and each region runs in a test here, judged by what it returns and by
// independent means (the thread that ran a callback, the bytes that arrived, the order of a log).
// `testArticleExamplesAreTheCodeThatRunsHere` fails when an article and this file drift apart.
// This approach, rather than SwiftPM snippets (Snippets/ and @Snippet), because a snippet is an
// executable that SwiftPM builds with every `swift build` and links against every library target
// of the package (ThreadKitPostgres, so SwiftNIO and postgres-nio, included), and it only
// compiles: it does not assert that the example does what the article says.
//
// `testTheStaticSiteRendersInHeadlessChromium` opens the static-hosting build that .ci/docs.sh
// writes (TK_DOCS_SITE: the folder that holds `threadkit/`, the `--hosting-base-path`) through a
// local HTTP server (python3 -m http.server in a child process) in headless Chromium (the
// `Chromium` helper of TraceRenderingTests), and reads back from the DOM that the landing page
// and the TKThread page render their titles. Without TK_DOCS_SITE it skips, saying how to run it.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class DocumentationTests: XCTestCase {
    // MARK: The articles and this file agree

    /// The package root, from this file's path (Tests/ThreadKitTests/DocumentationTests.swift).
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let catalog = packageRoot.appendingPathComponent("Sources/ThreadKit/ThreadKit.docc")

    /// The topic articles: each must show at least one example that runs here.
    static let topicArticles = ["WorkingWithThreads", "RunLoops", "PerformRequests", "Ports", "PostingNotifications", "Dispatch",
                                "Operations", "Synchronization", "SwiftConcurrency", "RunLoopIO", "DiagnosingThreadingProblems"]

    func testArticleExamplesAreTheCodeThatRunsHere() throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let regions = Self.regions(in: source)
        let articles = try FileManager.default.contentsOfDirectory(atPath: Self.catalog.path).filter { $0.hasSuffix(".md") }
        XCTAssertFalse(articles.isEmpty, "no articles found in \(Self.catalog.path)")
        var blocksByArticle: [String: [String]] = [:]
        for file in articles {
            let name = String(file.dropLast(3))
            let text = try String(contentsOf: Self.catalog.appendingPathComponent(file), encoding: .utf8)
            blocksByArticle[name] = Self.swiftBlocks(in: text)
        }
        for (article, blocks) in blocksByArticle {
            let mine = regions[article] ?? []
            for (index, block) in blocks.enumerated() where !mine.contains(block) {
                XCTFail("\(article).md: swift block \(index + 1) is not a `// docs:begin \(article)` region of "
                        + "DocumentationTests.swift, so nothing compiles or runs it. Fix: copy it here between the markers "
                        + "(or fix the drift). The block:\n\(block)")
            }
        }
        for (article, texts) in regions {
            guard let blocks = blocksByArticle[article] else {
                XCTFail("`// docs:begin \(article)`: there is no \(article).md in \(Self.catalog.path)")
                continue
            }
            for text in texts where !blocks.contains(text) {
                XCTFail("a `// docs:begin \(article)` region is not a swift block of \(article).md. Fix: copy it into "
                        + "the article (or fix the drift). The region:\n\(text)")
            }
        }
        for article in Self.topicArticles {
            XCTAssertFalse((regions[article] ?? []).isEmpty, "\(article).md shows no example that runs here")
        }
    }

    /// The `// docs:begin NAME` … `// docs:end` regions of `source`, by NAME, each dedented by its
    /// begin marker's indentation.
    static func regions(in source: String) -> [String: [String]] {
        var result: [String: [String]] = [:]
        var current: (name: String, indent: Int, lines: [String])?
        for line in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("// docs:begin ") {
                current = (String(trimmed.dropFirst("// docs:begin ".count)), line.count - trimmed.count, [])
            } else if trimmed == "// docs:end", let region = current {
                result[region.name, default: []].append(region.lines.joined(separator: "\n"))
                current = nil
            } else if let region = current {
                let text = line.count - line.drop { $0 == " " }.count >= region.indent ? String(line.dropFirst(region.indent)) : String(trimmed)
                current?.lines.append(text)
            }
        }
        return result
    }

    /// The contents of the ```swift fenced blocks of a Markdown text.
    static func swiftBlocks(in markdown: String) -> [String] {
        var blocks: [String] = []
        var current: [String]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```swift" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(String(line))
            }
        }
        return blocks
    }

    // MARK: Threads

    func testThreadsExample() throws {
        // docs:begin WorkingWithThreads
        // A thread configured before it starts, as NSThread's attributes are.
        let saved = TKAtomicInt(0)
        let saver = TKThread(name: "saver") {
            saved.store(1)                       // runs on the new thread, already named "saver"
        }
        try saver.setStackSize(1 << 20)          // 1 MiB: a multiple of 4 KiB, before start()
        saver.qualityOfService = .utility        // applied to the OS thread (its nice value)
        saver.isDetached = false                 // joinable: a normal exit of the process waits for it
        saver.start()
        saver.join()

        // A thread that hands a value to every thread that joins it.
        let summer = TKJoinableThread(name: "sum") { (1...100).reduce(0, +) }
        summer.start()
        let total = summer.joinValue()           // 5050
        // docs:end
        XCTAssertEqual(saved.load(), 1)
        XCTAssertTrue(saver.isFinished)
        XCTAssertEqual(saver.stackSize, 1 << 20)
        XCTAssertEqual(total, 5050)
    }

    // MARK: Run loops

    func testRunLoopsExample() throws {
        let result = TKJoinableThread<TKRunLoop.RunResult>(name: "docs-runloop") {
            // docs:begin RunLoops
            // On a thread of its own: a timer in the common modes keeps firing while the loop runs
            // in a tracking mode, and an observer sees each time the loop is about to sleep.
            let loop = TKRunLoop.current
            let fires = TKAtomicInt(0), sleeps = TKAtomicInt(0)
            let timer = TKTimer(interval: .milliseconds(10), repeats: true) { timer in
                if fires.increment() == 3 {
                    timer.invalidate()
                    TKRunLoop.current.stop()         // ends the run below
                }
            }
            loop.add(timer, forMode: .common)        // every common mode, now and later
            loop.addCommonMode(.eventTracking)       // a secondary thread's loop starts with .default only
            let observer = TKRunLoopObserver(activities: .beforeWaiting) { _, _ in sleeps.increment() }
            loop.add(observer, forMode: .eventTracking)
            let result = loop.run(mode: .eventTracking, for: .seconds(10), returnAfterSourceHandled: false)
            // result == .stopped, fires.load() == 3, sleeps.load() >= 3
            // docs:end
            XCTAssertEqual(fires.load(), 3)
            XCTAssertGreaterThanOrEqual(sleeps.load(), 3)
            observer.invalidate()
            return result
        }
        result.start()
        XCTAssertEqual(result.joinValue(), .stopped)
    }

    // MARK: Perform requests

    func testPerformRequestsExample() throws {
        // docs:begin PerformRequests
        // The seeds' resident network thread: a port keeps its run loop alive between requests,
        // and every request runs on it, in the order sent, until one tells it to stop.
        let keepRunning = TKAtomicInt(1)
        let network = TKThread(name: "network") {
            let loop = TKRunLoop.current
            loop.add(TKMessagePort(), forMode: .default)   // an input source: the loop never runs dry
            while keepRunning.load() == 1 && loop.run(mode: .default, before: .now + .seconds(60)) {}
        }
        network.start()

        let log = Mutex<[String]>([])
        for request in 1...3 {
            try network.perform { log.withLock { $0.append("request \(request) on \(TKThread.current.name!)") } }
        }
        try network.perform(waitUntilDone: true) { log.withLock { $0.append("the last one, waited for") } }
        // log: request 1 on network, request 2 on network, request 3 on network, the last one, waited for

        try network.perform { keepRunning.store(0) }    // run(mode:before:) returns after a request
        network.join()
        var refusal: TKError.Code?
        do { try network.perform {} } catch let error as TKError { refusal = error.code }
        // refusal == .threadFinished: a request to a finished thread is refused, never lost
        // docs:end
        XCTAssertEqual(log.withLock { $0 }, ["request 1 on network", "request 2 on network", "request 3 on network",
                                             "the last one, waited for"])
        XCTAssertEqual(refusal, .threadFinished)
    }

    // MARK: Ports

    func testPortsExample() throws {
        // docs:begin Ports
        /// This thread's side: msgid 1000 asks for a print task; the answer goes to the reply port.
        final class PrintTask: TKPortDelegate {
            let handled = TKAtomicInt(0)
            func handlePortMessage(_ message: TKPortMessage) {
                guard message.msgid == 1000 else { return }
                handled.increment()
                // On arrival, sendPort is the sender's receivePort: the port to answer on.
                let answer = TKPortMessage(sendPort: message.sendPort, receivePort: nil,
                                           components: [.data(Array("printed".utf8))])
                answer.msgid = 1001
                _ = answer.send(before: .now + .seconds(5))
            }
        }
        /// The secondary thread's side: it records the answer.
        final class Answers: TKPortDelegate {
            let received = Mutex<[String]>([])
            func handlePortMessage(_ message: TKPortMessage) {
                guard case .data(let bytes)? = message.components.first else { return }
                received.withLock { $0.append("\(message.msgid): \(String(decoding: bytes, as: UTF8.self))") }
                TKRunLoop.current.stop()
            }
        }

        let printTask = PrintTask(), answers = Answers()
        let mainPort = TKMessagePort()
        mainPort.delegate = printTask
        TKRunLoop.current.add(mainPort, forMode: .default)       // a version-1 source of this thread's loop

        let secondary = TKThread(name: "secondary") {
            let ownPort = TKMessagePort()
            ownPort.delegate = answers
            TKRunLoop.current.add(ownPort, forMode: .default)
            let message = TKPortMessage(sendPort: mainPort, receivePort: ownPort, components: [])
            message.msgid = 1000
            _ = message.send(before: .now + .seconds(5))         // queued even if the loop is not running yet
            TKRunLoop.current.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        }
        secondary.start()
        let deadline = ContinuousClock.now + .seconds(10)
        while printTask.handled.load() == 0 && ContinuousClock.now < deadline {
            TKRunLoop.current.run(mode: .default, before: deadline)   // returns after each source it handled
        }
        secondary.join()
        TKRunLoop.current.remove(mainPort, forMode: .default)
        // printTask.handled.load() == 1, answers.received == ["1001: printed"]
        // docs:end
        XCTAssertEqual(printTask.handled.load(), 1)
        XCTAssertEqual(answers.received.withLock { $0 }, ["1001: printed"])
    }

    // MARK: Notifications

    func testNotificationsExample() throws {
        let result = TKJoinableThread<[String]>(name: "docs-notifications") {
            // docs:begin PostingNotifications
            // Posting is synchronous: every observer has run when post returns.
            let center = TKNotificationCenter()
            let downloaded: TKNotification.Name = "DataDidDownload"
            let sizes = Mutex<[Int]>([])
            let token = center.addObserver(forName: downloaded, object: nil) { note in
                sizes.withLock { $0.append(note.userInfo?["bytes"] as? Int ?? 0) }
            }
            center.post(name: downloaded, userInfo: ["bytes": 20_000])
            center.removeObserver(token)                  // sizes == [20000]

            // Idle-time notifications: five enqueued in one pass post once, when the loop is about to sleep.
            final class Document: Sendable {}
            let document = Document(), changed: TKNotification.Name = "DocumentChanged"
            let posts = Mutex<[String]>([])
            let observer = center.addObserver(forName: changed, object: document) { note in
                posts.withLock { $0.append(note.userInfo?["edit"] as? String ?? "?") }
                TKRunLoop.current.stop()
            }
            let queue = TKNotificationQueue(notificationCenter: center)   // posts on this thread's loop
            let loop = TKRunLoop.current
            loop.add(TKRunLoopSource {}, forMode: .default)               // something to wait for
            loop.perform {
                for edit in 1...5 {
                    queue.enqueue(TKNotification(name: changed, object: document, userInfo: ["edit": "edit \(edit)"]),
                                  postingStyle: .whenIdle)                // coalesced on name and sender
                }
            }
            loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
            center.removeObserver(observer)               // posts == ["edit 1"]: the first kept, four merged into it
            // docs:end
            XCTAssertEqual(sizes.withLock { $0 }, [20_000])
            return posts.withLock { $0 }
        }
        result.start()
        XCTAssertEqual(result.joinValue(), ["edit 1"])
    }

    // MARK: Dispatch

    func testDispatchExample() throws {
        // docs:begin Dispatch
        /// A photo store read by many and written by one: sync reads, barrier writes on a concurrent queue.
        final class PhotoStore: @unchecked Sendable {
            private let queue = TKDispatchQueue(label: "photos", attributes: .concurrent)
            private var photos: [String] = []     // read in sync blocks, written in barrier blocks only
            func add(_ photo: String) { queue.async(flags: .barrier) { self.photos.append(photo) } }
            var all: [String] { queue.sync { photos } }
        }

        // Three downloads in a group; the group says when all are done.
        let store = PhotoStore()
        let group = TKDispatchGroup()
        for name in ["a.jpg", "b.jpg", "c.jpg"] {
            TKDispatchQueue.global(qos: .utility).async(group: group) { store.add(name) }
        }
        let allDone = TKDispatchSemaphore(value: 0)
        group.notify(queue: .global(qos: .userInitiated)) { allDone.signal() }
        allDone.wait()
        let photos = store.all                    // the three, in the order the barriers ran

        // A repeating timer source counting down, cancelling itself at zero.
        let remaining = TKAtomicInt(3)
        let countdown = TKDispatchSource.makeTimerSource(queue: TKDispatchQueue(label: "countdown"))
        countdown.schedule(deadline: .now, repeating: .milliseconds(10))
        countdown.setEventHandler { if remaining.decrement() == 0 { countdown.cancel() } }
        countdown.setCancelHandler { allDone.signal() }
        countdown.activate()
        allDone.wait()                            // remaining.load() == 0
        // docs:end
        XCTAssertEqual(photos.sorted(), ["a.jpg", "b.jpg", "c.jpg"])
        XCTAssertEqual(remaining.load(), 0)
        XCTAssertTrue(countdown.isCancelled)
    }

    // MARK: Operations

    func testOperationsExample() throws {
        // docs:begin Operations
        // Download → decode → thumbnail: dependencies decide the order, whatever the queue's width.
        let queue = TKOperationQueue()
        queue.name = "photos"
        let log = Mutex<[String]>([])
        let download = TKBlockOperation { log.withLock { $0.append("download") } }
        let decode = TKBlockOperation { log.withLock { $0.append("decode") } }
        let thumbnail = TKBlockOperation { log.withLock { $0.append("thumbnail") } }
        try decode.addDependency(download)
        try thumbnail.addDependency(decode)
        thumbnail.completionBlock = { log.withLock { $0.append("thumbnail's completion block") } }
        queue.addOperations([thumbnail, decode, download], waitUntilFinished: true)

        // A cycle is refused when it is made, naming the operations, instead of hanging the queue.
        let first = TKBlockOperation {}, second = TKBlockOperation {}
        first.name = "first"
        second.name = "second"
        try second.addDependency(first)
        var refused: TKError?
        do { try first.addDependency(second) } catch let error as TKError { refused = error }
        // refused?.code == .dependencyCycle
        // docs:end
        let order = log.withLock { $0 }
        XCTAssertEqual(Array(order.prefix(3)), ["download", "decode", "thumbnail"])
        XCTAssertTrue(thumbnail.isFinished)
        XCTAssertEqual(refused?.code, .dependencyCycle)
        // The completion block runs after the operation finished, maybe after the wait returned.
        let deadline = ContinuousClock.now + .seconds(10)
        while log.withLock({ $0.count }) < 4 && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(1)) }
        XCTAssertEqual(log.withLock { $0 }.last, "thumbnail's completion block")
    }

    // MARK: Locks, conditions and atomics

    func testSynchronizationExample() throws {
        // docs:begin Synchronization
        // The seeds' producer and consumer on a condition lock: NO_DATA and HAS_DATA.
        let noData = 0, hasData = 1
        final class Buffer: @unchecked Sendable { var items: [Int] = [] }   // guarded by `condition`
        let buffer = Buffer()
        let condition = TKConditionLock(condition: noData)

        let producer = TKThread(name: "producer") {
            for item in 1...5 {
                condition.lock(whenCondition: noData)
                buffer.items.append(item)
                condition.unlock(withCondition: hasData)
            }
        }
        let consumed = TKAtomicInt(0)
        let consumer = TKThread(name: "consumer") {
            for _ in 1...5 {
                condition.lock(whenCondition: hasData)
                consumed.add(buffer.items.removeFirst())
                condition.unlock(withCondition: noData)
            }
        }
        producer.start()
        consumer.start()
        producer.join()
        consumer.join()                           // consumed.load() == 15

        // Atomics: a counter shared by a parallel loop.
        let counted = TKAtomicInt(0)
        TKDispatchQueue.concurrentPerform(iterations: 1_000) { _ in counted.increment() }
        // counted.load() == 1_000
        // docs:end
        XCTAssertEqual(consumed.load(), 15)
        XCTAssertTrue(buffer.items.isEmpty)
        XCTAssertEqual(counted.load(), 1_000)
    }

    // MARK: Swift concurrency

    func testSwiftConcurrencyExample() async throws {
        // docs:begin SwiftConcurrency
        /// The resident network thread as an actor: every job of it runs on that thread's run loop.
        actor Connection {
            let loop: TKRunLoop
            nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
            private var sent = 0
            init(loop: TKRunLoop) { self.loop = loop }
            func send() -> String {
                sent += 1
                return "request \(sent) on \(TKThread.current.name ?? "?")"
            }
        }

        let published = Mutex<TKRunLoop?>(nil)
        let ready = TKDispatchSemaphore(value: 0)
        let network = TKThread(name: "network") {
            let loop = TKRunLoop.current
            loop.add(TKMessagePort(), forMode: .default)   // keeps the loop alive between jobs
            published.withLock { $0 = loop }
            ready.signal()
            loop.run()                                      // until stop()
        }
        network.start()
        try await ready.acquire()                          // suspends the task, blocks no thread
        let loop = published.withLock { $0! }

        let connection = Connection(loop: loop)
        async let first = connection.send()
        async let second = connection.send()
        let replies = await [first, second]                // both "… on network", one at a time

        loop.stop()
        try await network.finished()                       // the thread's end, awaited
        // docs:end
        XCTAssertEqual(replies.sorted(), ["request 1 on network", "request 2 on network"])
        XCTAssertTrue(network.isFinished)
    }

    // MARK: Run-loop I/O

    func testRunLoopIOExample() throws {
        // docs:begin RunLoopIO
        /// Reads what arrives, on the thread of the loop the stream is scheduled on.
        final class Reader: TKStreamDelegate {
            let received = Mutex<[UInt8]>([])
            func stream(_ stream: TKStream, handle event: TKStream.Event) {
                if event.contains(.hasBytesAvailable), let input = stream as? TKInputStream {
                    var buffer = [UInt8](repeating: 0, count: 1024)
                    let count = input.read(&buffer, maxLength: buffer.count)
                    if count > 0 { received.withLock { $0 += buffer[..<count] } }
                }
                if event.contains(.endEncountered) || event.contains(.errorOccurred) {
                    stream.close()
                    TKRunLoop.current.stop()
                }
            }
        }

        // One loop thread serves both ends: a listening socket greets each client and hangs up...
        let loop = TKRunLoop.current
        let greeting = Array("hello from the loop\n".utf8)
        let listener = try TKSocketListener(port: 0) { socket in
            let (input, output) = TKStream.getStreams(forConnectedSocket: socket)
            output.open()                                  // unscheduled: writes block until done
            _ = output.write(greeting, maxLength: greeting.count)
            output.close()
            input.close()
        }
        listener.schedule(in: loop, forMode: .default)

        // ...and a client reads the greeting. Schedule first, run the loop last.
        let reader = Reader()
        let (input, output) = TKStream.getStreamsToHost(withName: "127.0.0.1", port: Int(listener.port))
        input.delegate = reader
        input.schedule(in: loop, forMode: .default)
        input.open()
        output.open()
        loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: false)
        output.close()
        listener.invalidate()                              // reader.received == greeting
        // docs:end
        XCTAssertEqual(reader.received.withLock { $0 }, greeting)
        XCTAssertEqual(input.streamStatus, .closed)
    }

    // MARK: Diagnostics

    func testDiagnosticsExample() throws {
        let before = TKDiagnostics.features
        let printed = TKDiagnostics.printsReports
        defer {
            TKDiagnostics.setLockOrderHandler(nil)
            TKDiagnostics.printsReports = printed
            if !before.contains(.lockOrder) { TKDiagnostics.disable(.lockOrder) }
        }
        TKDiagnostics.printsReports = false
        // docs:begin DiagnosingThreadingProblems
        // The seeds' two-lock deadlock, predicted before it happens.
        TKDiagnostics.enable(.lockOrder)                   // on by default in debug builds
        let cycles = Mutex<[String]>([])
        TKDiagnostics.setLockOrderHandler { report in cycles.withLock { $0.append(report.description) } }

        let accounts = TKLock(), auditLog = TKLock()
        accounts.name = "accounts"
        auditLog.name = "audit log"
        let transfer = TKThread(name: "A") { accounts.withLock { auditLog.withLock {} } }
        transfer.start()
        transfer.join()
        let audit = TKThread(name: "B") { auditLog.withLock { accounts.withLock {} } }   // the other order
        audit.start()
        audit.join()
        // Nothing deadlocked, yet cycles holds one report: audit log -> accounts -> audit log,
        // with the call stack where each order was first seen.

        // The trace recorder: what the threads did, as a timeline.
        TKTrace.start()
        TKTrace.mark("checkout")
        let group = TKDispatchGroup()
        for _ in 1...4 { TKDispatchQueue.global().async(group: group) { _ = (1...1_000).reduce(0, +) } }
        group.wait()
        TKTrace.stop()
        let timeline = TKTrace.html(title: "checkout")    // one self-contained page; chromeJSON() for Perfetto
        // docs:end
        let reports = cycles.withLock { $0 }
        XCTAssertEqual(reports.count, 1, reports.joined(separator: "\n"))
        XCTAssertTrue(reports.first?.contains("accounts") == true && reports.first?.contains("audit log") == true,
                      reports.first ?? "")
        XCTAssertTrue(timeline.contains("<html") || timeline.contains("<!DOCTYPE"), String(timeline.prefix(200)))
        XCTAssertTrue(TKTrace.events.contains { $0.kind == .mark && $0.name == "checkout" })
    }

    // MARK: The static site in a browser

    func testTheStaticSiteRendersInHeadlessChromium() throws {
        guard let site = ProcessInfo.processInfo.environment["TK_DOCS_SITE"] else {
            throw XCTSkip("TK_DOCS_SITE is not set: this test opens the static-hosting documentation build. "
                          + "Run .ci/docs.sh, which builds it and runs this test with TK_DOCS_SITE pointing at it.")
        }
        let landing = URL(fileURLWithPath: site).appendingPathComponent("threadkit/documentation/threadkit/index.html")
        guard FileManager.default.fileExists(atPath: landing.path) else {
            XCTFail("TK_DOCS_SITE=\(site) has no threadkit/documentation/threadkit/index.html. Fix: point it at the "
                    + "folder that holds `threadkit/` (the --hosting-base-path) of a --transform-for-static-hosting build.")
            return
        }
        let chromium = try Chromium.locate()
        let server = try StaticSiteServer(root: site)
        defer { server.stop() }
        let profiles = FileManager.default.temporaryDirectory.appendingPathComponent("tk-docs-\(getpid())")
        defer { try? FileManager.default.removeItem(at: profiles) }

        for (path, title) in [("threadkit/documentation/threadkit/", "ThreadKit"),
                              ("threadkit/documentation/threadkit/tkthread", "TKThread")] {
            let url = "http://127.0.0.1:\(server.port)/\(path)"
            // The page is a Vue app that fetches its JSON: give it virtual time to load and render.
            let dom = try chromium.run(["--virtual-time-budget=20000", "--dump-dom", url],
                                       profile: profiles.appendingPathComponent(title).path)
            let headings = Self.texts(ofTag: "h1", in: dom)
            XCTAssertTrue(headings.contains(title), "\(url): no <h1> reading \(title) in the rendered DOM "
                          + "(h1s: \(headings)); the first 400 characters: \(dom.prefix(400))")
            XCTAssertFalse(dom.contains("The page you're looking for can't be found"), "\(url) rendered DocC's not-found page")
        }
    }

    /// The text of each `<tag …>…</tag>` in `html`, inner tags removed, whitespace trimmed.
    static func texts(ofTag tag: String, in html: String) -> [String] {
        var result: [String] = []
        var rest = html[...]
        while let open = rest.range(of: "<\(tag)"), let close = rest[open.upperBound...].range(of: "</\(tag)>") {
            let inner = rest[open.upperBound..<close.lowerBound].drop { $0 != ">" }.dropFirst()
            var text = "", inTag = false
            for character in inner {
                if character == "<" { inTag = true } else if character == ">" { inTag = false } else if !inTag { text.append(character) }
            }
            result.append(text.trimmingCharacters(in: .whitespacesAndNewlines))
            rest = rest[close.upperBound...]
        }
        return result
    }
}

/// `python3 -m http.server` on 127.0.0.1 and a port the system chooses, serving `root`, in a
/// child process; the port is read from the line the server prints when it is listening.
final class StaticSiteServer {
    let port: Int
    private let process = Process()

    init(root: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", root]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        var seen = ""
        var found: Int?
        let handle = output.fileHandleForReading
        while found == nil {
            let chunk = handle.availableData
            if chunk.isEmpty { break }   // the server exited
            seen += String(decoding: chunk, as: UTF8.self)
            if let range = seen.range(of: " port "), let end = seen[range.upperBound...].firstIndex(of: " ") {
                found = Int(seen[range.upperBound..<end])
            }
        }
        guard let found else {
            process.terminate()
            throw XCTSkip("python3 -m http.server did not start (it printed: \(seen)); the static site needs an HTTP server")
        }
        port = found
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
