import CThreadKit
import Foundation
import Synchronization
import Testing
import XCTest

// TKThread: the three forms, names (also as the OS sees them), scheduling, stack sizes, state,
// current/main, notifications, sleeping, call stacks, uncaught errors, joining, exit-time joins.
// A thread the OS cannot create is started in a child process whose address space is capped
// (`ThreadKitTestChild thread-stack-unmappable`). Each point that Foundation's Thread gets wrong on
// Linux is tested explicitly.
@testable import ThreadKit

final class ThreadTests: XCTestCase {
    /// /proc/thread-self/comm of the calling thread: the name the OS shows.
    static func osName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .newlines)
    }

    /// Field `index` (1-based, as in proc(5)) of /proc/self/task/TID/stat.
    static func statField(tid: UInt32, _ index: Int) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return index - 3 < fields.count ? String(fields[index - 3]) : nil
    }

    /// Runs `body` on a started TKThread configured by `configure`, and returns its result.
    func onThread<T: Sendable>(
        _ configure: (TKThread) -> Void = { _ in },
        _ body: @escaping @Sendable () -> T
    ) -> T {
        let result = Shared<T?>(nil) // written by the thread before it finishes; read after join
        let thread = TKThread { result.value = body() }
        configure(thread)
        thread.start()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        return result.value!
    }

    // MARK: Forms

    func testBlockThrowingAndSubclassFormsRun() {
        let ran = JudgedCounter()
        let block = TKThread { ran.add() }
        let throwing = TKThread(name: "t", throwing: { ran.add() })
        final class Adder: TKThread, @unchecked Sendable {
            let a: Int, b: Int, counter: JudgedCounter
            init(_ a: Int, _ b: Int, _ counter: JudgedCounter) {
                self.a = a
                self.b = b
                self.counter = counter
                super.init()
            }
            override func main() { counter.add(a + b) }
        }
        let subclass = Adder(2, 3, ran)
        for t in [block, throwing, subclass] { t.start() }
        for t in [block, throwing, subclass] { XCTAssertTrue(t.join(until: .now + .seconds(30))) }
        let detached = TKThread.detachNewThread(name: "d") { ran.add() }
        XCTAssertTrue(detached.join(until: .now + .seconds(30)))
        XCTAssertEqual(ran.count, 1 + 1 + 5 + 1)
    }

    // MARK: Names

    func testNameSetBeforeStartIsTheNameInsideAndForTheOS() {
        let (inside, os) = onThread({ $0.name = "saver" }) { (TKThread.current.name, ThreadTests.osName()) }
        XCTAssertEqual(inside, "saver")
        XCTAssertEqual(os, "saver", "Foundation on Linux shows the process name here")
    }

    func testLongNamesAreTruncatedForTheOSOnly() {
        let long = "com.example.network-thread"
        let (inside, os) = onThread({ $0.name = long }) { (TKThread.current.name, ThreadTests.osName()) }
        XCTAssertEqual(inside, long)
        XCTAssertEqual(os, "com.example.net")
        XCTAssertEqual(TKThread.osName("ééééééééé"), "ééééééé", "cut on a character boundary, 14 bytes")
    }

    func testRenamingARunningThreadReachesTheOS() {
        let renamed = DispatchSemaphore(value: 0)
        let seen = Shared("")
        let thread = TKThread(name: "before") {
            renamed.wait()
            seen.value = ThreadTests.osName()
        }
        thread.start()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { thread.isExecuting }, "timed out waiting until the thread runs")
        thread.name = "after"
        renamed.signal()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertEqual(seen.value, "after")
    }

    // MARK: Scheduling

    func testQualityOfServiceChangesTheThreadsScheduling() {
        let expectations: [(TKQualityOfService, Int32, Int32)] = [
            (TKQualityOfService.utility, 0 /* SCHED_OTHER */, 5), (.background, TK_SCHED_BATCH, 10), (.default, 0, 0),
        ]
        for (qos, policy, nice) in expectations {
            let (seenPolicy, seenNice) = onThread({ $0.qualityOfService = qos }) {
                (sched_getscheduler(0), getpriority(__priority_which_t(0), 0))
            }
            XCTAssertEqual(seenPolicy, policy, "\(qos): Foundation stores QoS but never applies it")
            XCTAssertEqual(seenNice, nice, "\(qos)")
        }
        XCTAssertEqual(TKThread().qualityOfService, .default)
        let ordered: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]
        XCTAssertEqual(ordered.shuffled().sorted(), ordered)
    }

    func testChangingQualityOfServiceWhileRunningApplies() {
        let go = DispatchSemaphore(value: 0)
        let nice = Shared<Int32>(99)
        let thread = TKThread {
            go.wait()
            nice.value = getpriority(__priority_which_t(0), 0)
        }
        thread.start()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { thread.isExecuting }, "timed out waiting until the thread runs")
        thread.qualityOfService = .utility
        XCTAssertEqual(thread.qualityOfService, .utility)
        go.signal()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertEqual(nice.value, 5)
    }

    func testThreadPriorityMapsToNiceValues() throws {
        XCTAssertEqual(onThread({ $0.threadPriority = 0.0 }) { getpriority(__priority_which_t(0), 0) }, 10)
        XCTAssertEqual(onThread({ $0.threadPriority = 0.25 }) { getpriority(__priority_which_t(0), 0) }, 5)
        let t = TKThread {}
        t.threadPriority = 0.75
        XCTAssertEqual(t.threadPriority, 0.75, "reads back what was set")
        guard geteuid() == 0 else { throw XCTSkip("raising priority needs privilege; lowering was checked") }
        XCTAssertEqual(onThread({ $0.threadPriority = 1.0 }) { getpriority(__priority_which_t(0), 0) }, -10)
        XCTAssertEqual(onThread({ $0.qualityOfService = .userInteractive }) { getpriority(__priority_which_t(0), 0) }, -10)
    }

    func testSetThreadPrioritySaysWhetherTheOSHonouredIt() throws {
        // Privileged (as these tests usually run): raising is honoured and reads back.
        if geteuid() == 0 {
            let (ok, nice, priority) = onThread { () -> (Bool, Int32, Double) in
                let ok = TKThread.setThreadPriority(1.0)
                return (ok, getpriority(__priority_which_t(0), 0), TKThread.current.threadPriority)
            }
            XCTAssertTrue(ok)
            XCTAssertEqual(nice, -10)
            XCTAssertEqual(priority, 1.0)
        }
        // Unprivileged (a child that gave up root and RLIMIT_NICE): raising is refused, says so,
        // and the priority reads what is really in force (the kernel's nice value is the judge).
        let result = try ChildProcess.run("thread-priority-unprivileged")
        XCTAssertEqual(result.status, 0, result.standardError)
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        XCTAssertEqual(
            lines,
            [
                "raise-to-1.0 ok=false priority=0.5 nice=0",
                "lower-to-0.25 ok=true priority=0.25 nice=5",
                "raise-to-0.5 ok=false priority=0.25 nice=5",
                "qos-userInteractive ok=true priority=0.25 nice=5",
            ], result.standardOutput)
    }

    // MARK: Stack size

    func testInvalidStackSizesAreRefused() {
        let thread = TKThread {}
        for bad in [-1, 0, 1000, 4096, 12_288, 20_000] {
            XCTAssertThrowsError(try thread.setStackSize(bad)) { error in
                XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
                XCTAssertTrue((error as? TKError)?.message.contains("multiple of 4096") ?? false)
            }
        }
        XCTAssertEqual(thread.stackSize, 512 * 1024, "refused sizes change nothing")
    }

    func testStackSizeIsAppliedAndLockedAtStart() throws {
        let size = onThread({ try! $0.setStackSize(1 << 20) }) { tk_current_stack_size() }
        XCTAssertGreaterThanOrEqual(size, 1 << 20)
        XCTAssertGreaterThanOrEqual(onThread { tk_current_stack_size() }, 512 * 1024, "default 512 KiB")
        let started = TKThread {}
        started.start()
        XCTAssertThrowsError(try started.setStackSize(1 << 20)) { XCTAssertEqual(($0 as? TKError)?.code, .invalidArgument) }
        started.join()
    }

    func testTheMainThreadsStackSizeIsTheProcessStackLimit() throws {
        var limit = rlimit()
        XCTAssertEqual(getrlimit(__rlimit_resource_t(RLIMIT_STACK.rawValue), &limit), 0)
        guard limit.rlim_cur != ~rlim_t(0) else { throw XCTSkip("unlimited stack: TKThread.main reports Int.max") }
        XCTAssertEqual(TKThread.main.stackSize, Int(limit.rlim_cur))
        // The same from another thread (the object may be asked about from anywhere).
        XCTAssertEqual(onThread { TKThread.main.stackSize }, Int(limit.rlim_cur))
    }

    func testAForeignThreadsStackSizeIsItsRealStack() {
        // A pthread made here with a 1 MiB stack (the judge: the size asked of pthread_create).
        final class Box: @unchecked Sendable { var size = 0 }
        let box = Box()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setstacksize(&attr, 1 << 20)
        var handle = pthread_t()
        let context = Unmanaged.passRetained(box).toOpaque()
        XCTAssertEqual(
            pthread_create(
                &handle, &attr,
                { raw in
                    let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
                    box.size = TKThread.current.stackSize
                    return nil
                }, context), 0)
        XCTAssertEqual(pthread_join(handle, nil), 0)
        XCTAssertGreaterThanOrEqual(box.size, 1 << 20)
        XCTAssertLessThan(box.size, (1 << 20) + (64 << 10), "the thread's own stack, not ThreadKit's 512 KiB default")
    }

    func testAThreadTheOSCannotCreateReportsATKError() throws {
        // Whether the OS maps a 64 TiB stack depends on the machine (a 57-bit address space maps
        // it) and on overcommit, so the attempt runs in a child whose address space is capped
        // (RLIMIT_AS) 1 GiB above what it has mapped: there no machine can map it. The child
        // checks that premise with a plain mmap of the same size before starting the thread.
        let result = try ChildProcess.run("thread-stack-unmappable")
        XCTAssertEqual(result.status, 0, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
        var field: [String: String] = [:]
        for line in result.standardOutput.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            field[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        let out = result.standardOutput
        XCTAssertEqual(field["premise-mmap-refused"], "true", "the capped address space still mapped 64 TiB: \(out)")
        XCTAssertEqual(field["reported-for-this-thread"], "true", out)
        XCTAssertEqual(field["code"], "systemCall", out)
        XCTAssertNotNil(field["errno"].flatMap { Int32($0) }, out)
        XCTAssertTrue(field["message"]?.contains("\"huge\"") ?? false, out)
        XCTAssertEqual(field["finished"], "true", out)
        XCTAssertEqual(field["joined-at-once"], "true", out)
        XCTAssertEqual(field["ran"], "false", out)
    }

    // MARK: State

    func testLifecycleFlagsAndCancel() {
        let go = DispatchSemaphore(value: 0)
        let sawCancel = Atomic<Bool>(false)
        let thread = TKThread {
            go.wait()
            sawCancel.store(TKThread.current.isCancelled, ordering: .relaxed)
        }
        XCTAssertFalse(thread.isExecuting || thread.isFinished || thread.isCancelled)
        thread.start()
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { thread.isExecuting }, "timed out waiting until executing")
        thread.cancel()
        go.signal()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertTrue(thread.isFinished && !thread.isExecuting && thread.isCancelled)
        XCTAssertTrue(sawCancel.load(ordering: .relaxed))
    }

    func testThreadDictionaryBelongsToEachThread() {
        TKThread.current.threadDictionary["who"] = "main"
        let other = onThread { () -> String in
            TKThread.current.threadDictionary["who"] = "worker"
            return TKThread.current.threadDictionary["who"] as? String ?? "none"
        }
        XCTAssertEqual(other, "worker")
        XCTAssertEqual(TKThread.current.threadDictionary["who"] as? String, "main")
        TKThread.current.threadDictionary["who"] = nil
    }

    func testMainAndCurrent() {
        XCTAssertTrue(Thread.isMainThread, "XCTest runs tests on the main thread")
        XCTAssertTrue(TKThread.isMainThread)
        XCTAssertTrue(TKThread.current === TKThread.main)
        XCTAssertTrue(TKThread.main.isMainThread)
        let (isMain, staticIsMain) = onThread { (TKThread.current.isMainThread, TKThread.isMainThread) }
        XCTAssertFalse(isMain || staticIsMain)
    }

    func testCurrentForAThreadThreadKitDidNotCreateIsStableAndFinishesWithIt() {
        let first = Shared<TKThread?>(nil)
        let same = Shared(false)
        let foreign = Workers.start {
            let a = TKThread.current
            let b = TKThread.current
            first.value = a
            same.value = a === b && !a.isMainThread && a.isExecuting
        }
        XCTAssertEqual(foreign.wait(timeout: .now() + 30), .success)
        XCTAssertTrue(same.value)
        let adopted = first.value!
        XCTAssertTrue(adopted.join(until: .now + .seconds(30)), "an adopted thread's object finishes when its thread exits")
        XCTAssertTrue(adopted.isFinished)
        XCTAssertTrue(TKThread.current !== adopted)
    }

    // MARK: Notifications

    func testWillExitIsPostedOnTheExitingThread() {
        let postedOn = Shared<(TKThread?, Bool)>((nil, false)) // guarded by lock
        let lock = NSLock()
        let thread = TKThread(name: "leaving") {}
        let token = TKNotificationCenter.default.addObserver(forName: TKThread.willExitNotification, object: thread) { note in
            lock.lock()
            postedOn.value = (note.object as? TKThread, TKThread.current === (note.object as? TKThread))
            lock.unlock()
        }
        defer { TKNotificationCenter.default.removeObserver(token) }
        thread.start()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        lock.lock()
        defer { lock.unlock() }
        XCTAssertTrue(postedOn.value.0 === thread)
        XCTAssertTrue(postedOn.value.1, "posted on the exiting thread itself")
    }

    func testExitPostsWillExitAndEndsTheThread() {
        let after = Atomic<Bool>(false)
        let posted = Atomic<Bool>(false)
        let thread = TKThread {
            TKThread.exit()
        }
        let token = TKNotificationCenter.default.addObserver(forName: TKThread.willExitNotification, object: thread) { _ in
            posted.store(true, ordering: .relaxed)
        }
        defer { TKNotificationCenter.default.removeObserver(token) }
        _ = after
        thread.start()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertTrue(posted.load(ordering: .relaxed))
        XCTAssertTrue(thread.isFinished)
    }

    func testWillBecomeMultiThreadedIsPostedOnceBeforeTheFirstThreadRuns() throws {
        let result = try ChildProcess.run("multithreaded")
        XCTAssertEqual(result.status, 0, result.standardError)
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, "before multithreaded=false")
        XCTAssertEqual(lines.filter { $0.hasPrefix("notification") }.count, 1, "posted exactly once: \(lines)")
        let note = lines.firstIndex { $0.hasPrefix("notification") }!
        let firstRun = lines.firstIndex { $0.hasSuffix("runs") }!
        XCTAssertLessThan(note, firstRun, "posted before the first secondary thread ran: \(lines)")
        XCTAssertEqual(lines.last, "after multithreaded=true")
    }

    /// Listing 2-3: a worker runs its loop with an immediate deadline after each chunk of work; a
    /// custom input source signalled from another thread sets ThreadShouldExitNow in the worker's
    /// thread dictionary during that brief run, and the worker stops right after it.
    func testListing2_3AWorkerExitsThroughAnInputSourceAndItsThreadDictionary() {
        let chunksDone = Atomic<Int>(0)
        let loopBox = Guarded<TKRunLoop?>(nil)
        let scheduled = DispatchSemaphore(value: 0)
        let performed = Guarded<(onWorker: Bool, afterChunk: Int)?>(nil)
        let workerPthread = Guarded<pthread_t?>(nil)
        let outcome = Guarded<(chunks: Int, exitNow: Bool)?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let source = TKRunLoopSource(
            schedule: { loop, _ in
                loopBox.withLock { $0 = loop }
                scheduled.signal()
            },
            perform: {
                TKThread.current.threadDictionary["ThreadShouldExitNow"] = true
                let onWorker = workerPthread.withLock { $0.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
                performed.withLock { $0 = (onWorker, chunksDone.load(ordering: .relaxed)) }
            })
        let total = 10_000_000
        let worker = TKThread(name: "listing-2-3") {
            workerPthread.withLock { $0 = pthread_self() }
            TKThread.current.threadDictionary["ThreadShouldExitNow"] = false
            let loop = TKRunLoop.current
            loop.add(source, forMode: .default)
            var exitNow = false
            var chunks = 0
            while chunks < total && !exitNow {
                var x: UInt64 = 1
                for i in 0..<1_000 { x = x &* 6_364_136_223_846_793_005 &+ UInt64(i) }
                if x == 42 { print("unlikely") }
                chunks += 1
                chunksDone.store(chunks, ordering: .relaxed)
                loop.run(until: .now)
                exitNow = TKThread.current.threadDictionary["ThreadShouldExitNow"] as? Bool ?? false
            }
            outcome.withLock { $0 = (chunks, exitNow) }
            finished.signal()
        }
        worker.start()
        XCTAssertEqual(scheduled.wait(timeout: .now() + 30), .success, "the source was never scheduled")
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { chunksDone.load(ordering: .relaxed) >= 10 })
        let requestedAfter = chunksDone.load(ordering: .relaxed)
        source.signal()
        loopBox.withLock { $0 }?.wakeUp()
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success, "the worker never left its loop")
        let (chunks, exitNow) = outcome.withLock { $0 } ?? (0, false)
        let handled = performed.withLock { $0 }
        XCTAssertTrue(exitNow, "the worker ran out of work instead of reading ThreadShouldExitNow")
        XCTAssertEqual(handled?.onWorker, true, "the source's handler ran off the worker thread")
        XCTAssertGreaterThanOrEqual(handled?.afterChunk ?? -1, requestedAfter)
        XCTAssertEqual(chunks, handled?.afterChunk, "the worker did more work after the handler asked it to stop")
        XCTAssertLessThan(chunks, total)
        XCTAssertTrue(worker.join(until: .now + .seconds(30)))
    }

    /// create-threads' fourth form: performInBackground runs the block on a new, detached thread,
    /// and starting it makes the process multithreaded.
    func testPerformInBackgroundRunsOnANewDetachedThreadAndMakesTheProcessMultiThreaded() throws {
        let result = try ChildProcess.run("perform-in-background")
        XCTAssertEqual(result.status, 0, result.standardError)
        let lines = result.standardOutput.split(separator: "\n").map(String.init)
        XCTAssertEqual(
            lines,
            [
                "before multithreaded=false", "background onMainPthread=false name=performInBackground",
                "detached=true", "after multithreaded=true",
            ])
    }

    // MARK: Sleeping, call stacks, errors

    func testSleepNeverReturnsEarly() {
        for ms in [1, 10, 40] {
            let deadline = ContinuousClock.now + .milliseconds(ms)
            TKThread.sleep(until: deadline)
            XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
            let start = ContinuousClock.now
            TKThread.sleep(for: .milliseconds(ms))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(ms))
        }
        TKThread.sleep(for: .seconds(-5)) // returns at once rather than sleeping "forever"
        TKThread.sleep(until: .now - .seconds(5))
    }

    func testCallStackHasAddressesAndDemangledSymbols() {
        let addresses = TKThread.callStackReturnAddresses
        let symbols = TKThread.callStackSymbols
        XCTAssertGreaterThan(addresses.count, 3)
        XCTAssertGreaterThan(symbols.count, 3)
        XCTAssertTrue(
            symbols.contains { $0.contains("XCTest") && $0.contains(".") && !$0.contains("$s") },
            "no demangled Swift frame in:\n\(symbols.joined(separator: "\n"))")
    }

    func testAnErrorEscapingAThrowingBlockGoesToTheHandler() {
        struct DiskFull: Error {}
        let got = Shared<(String?, Bool)>((nil, false)) // written on the thread, read after join
        let previous = TKThread.uncaughtErrorHandler
        TKThread.uncaughtErrorHandler = { thread, error in got.value = (thread.name, error is DiskFull) }
        defer { TKThread.uncaughtErrorHandler = previous }
        let io = TKThread(name: "io", throwing: { throw DiskFull() })
        io.start()
        XCTAssertTrue(io.join(until: .now + .seconds(30)))
        XCTAssertEqual(got.value.0, "io")
        XCTAssertTrue(got.value.1)
    }

    func testTheDefaultHandlerWritesOneLineAndTheProcessKeepsRunning() throws {
        let result = try ChildProcess.run("uncaught-default")
        XCTAssertEqual(result.status, 0)
        XCTAssertTrue(result.standardError.contains("uncaught error in TKThread \"io\""), result.standardError)
        XCTAssertEqual(result.standardError.split(separator: "\n").count, 1)
        XCTAssertTrue(result.standardOutput.contains("process still running"))
    }

    // MARK: Joining

    func testJoinUntilTimesOutNeverEarlyAndManyThreadsCanJoin() {
        let release = DispatchSemaphore(value: 0)
        let thread = TKThread { release.wait() }
        thread.start()
        let deadline = ContinuousClock.now + .milliseconds(30)
        XCTAssertFalse(thread.join(until: deadline))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        let joiners = (0..<4).map { _ in Workers.start { thread.join() } }
        release.signal()
        for j in joiners { XCTAssertEqual(j.wait(timeout: .now() + 30), .success) }
        XCTAssertTrue(thread.join(until: .now))
    }

    func testJoinReturnsAfterEveryThreadLocalDestructorRan() {
        // pthread_join's guarantee: the thread has really ended, its thread-specific destructors
        // included. The second destructor sets a third local, which needs another round.
        for _ in 0..<200 {
            let ran = JudgedCounter()
            let third = TKThreadLocal<Int> { _ in
                sched_yield()
                ran.add()
            }
            let first = TKThreadLocal<Int> { _ in
                sched_yield()
                ran.add()
            }
            let second = TKThreadLocal<Int> { _ in
                ran.add()
                third.value = 3
            }
            let thread = TKThread {
                first.value = 1
                second.value = 2
            }
            thread.start()
            thread.join()
            XCTAssertEqual(ran.count, 3, "join() returned before the thread's destructors ran")
            if ran.count != 3 { break }
        }
    }

    // MARK: Joinable threads with a value (pthread_exit / pthread_join)

    func testAJoinableThreadHandsItsValueToEveryJoiner() {
        let release = DispatchSemaphore(value: 0)
        let thread = TKJoinableThread(name: "sum") { () -> [Int] in
            release.wait()
            return [1, 2, 3]
        }
        XCTAssertFalse(thread.isDetached, "joinable from the start")
        thread.start()
        XCTAssertNil(thread.value, "no value while it runs")
        let got = Guarded<[[Int]?]>([])
        let joiners = (0..<3).map { _ in
            Workers.start {
                let v = thread.joinValue()
                got.withLock { $0.append(v) }
            }
        }
        release.signal()
        for j in joiners { XCTAssertEqual(j.wait(timeout: .now() + 30), .success) }
        XCTAssertEqual(got.withLock { $0 }, [[1, 2, 3], [1, 2, 3], [1, 2, 3]])
        XCTAssertEqual(thread.joinValue(), [1, 2, 3], "joined again")
        XCTAssertEqual(thread.value, [1, 2, 3])
    }

    func testExitWithAValueEndsTheThreadThere() {
        let after = Atomic<Bool>(false)
        @Sendable func deep(_ n: Int) -> Int {
            if n == 0 { TKJoinableThread<String>.exit(with: "left early") }
            return deep(n - 1)
        }
        let thread = TKJoinableThread<String> {
            _ = deep(5)
            after.store(true, ordering: .relaxed)
            return "returned"
        }
        thread.start()
        XCTAssertEqual(thread.joinValue(), "left early")
        XCTAssertFalse(after.load(ordering: .relaxed), "nothing after pthread_exit runs")
        XCTAssertTrue(thread.isFinished)
    }

    func testJoinValueWithADeadlineAndAThreadThatEndsWithoutAValue() {
        let release = DispatchSemaphore(value: 0)
        let thread = TKJoinableThread<Int> {
            release.wait()
            TKThread.exit() // pthread_exit(NULL): no value
        }
        thread.start()
        let deadline = ContinuousClock.now + .milliseconds(20)
        guard case .timedOut = thread.joinValue(until: deadline) else { return XCTFail("joined a running thread") }
        XCTAssertGreaterThanOrEqual(ContinuousClock.now, deadline)
        release.signal()
        guard case .ended(let value) = thread.joinValue(until: .now + .seconds(30)) else { return XCTFail("did not end") }
        XCTAssertNil(value)
    }

    // MARK: Detaching after start (pthread_detach)

    func testDetachingAStartedJoinableThreadLetsTheProcessExit() throws {
        let result = try ChildProcess.run("thread-detach-after-start", timeout: .seconds(60))
        XCTAssertEqual(result.status, 0, result.standardError)
        XCTAssertTrue(result.standardOutput.contains("detached=true"), result.standardOutput)
        // In this process: a detached thread can still be joined.
        let release = DispatchSemaphore(value: 0)
        let thread = TKThread { release.wait() }
        thread.isDetached = false
        thread.start()
        thread.isDetached = true
        XCTAssertTrue(thread.isDetached)
        release.signal()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        thread.isDetached = true // unchanged: no-op after the end too
    }

    func testFinishedThreadsAreFreed() {
        let alive = Freed.alive { freed in
            // (A thread that ends with TKThread.exit() is left out: as Apple's +exit and
            // pthread_exit, it skips the releases its frames owed, its own object's included.)
            let plain = TKThread { _ = TKRunLoop.current }
            let joinable = TKJoinableThread { [1, 2, 3] }
            let requested = TKThread {
                let loop = TKRunLoop.current
                loop.perform { TKRunLoop.current.stop() }
                loop.run(mode: .default, for: .seconds(30), returnAfterSourceHandled: false)
            }
            for (name, thread) in [("plain", plain), ("joinable", joinable), ("with a perform request", requested)] as [(String, TKThread)]
            {
                freed.watch(name, thread)
                thread.start()
            }
            let detached = TKThread.detachNewThread {}
            freed.watch("detached", detached)
            for thread in [plain, joinable, requested, detached] { thread.join() }
            XCTAssertEqual(joinable.joinValue(), [1, 2, 3])
        }
        XCTAssertEqual(alive, [])
    }

    func testJoinableThreadsAreJoinedBeforeTheProcessExits() throws {
        let path = NSTemporaryDirectory() + "tk-joinable-\(getpid()).txt"
        defer { unlink(path) }
        let result = try ChildProcess.run("joinable-save", [path])
        XCTAssertEqual(result.status, 0, result.standardError)
        let saved = try String(contentsOfFile: path, encoding: .utf8)
        XCTAssertTrue(saved.hasSuffix("chunk 20 of 20\n"), "the save was cut off: \(saved)")
    }

    func testDetachedThreadsAreNotWaitedFor() throws {
        let result = try ChildProcess.run("detached-blocked", timeout: .seconds(60))
        XCTAssertEqual(result.status, 0, "the process must exit although a detached thread still blocks")
    }
}

/// Misuses of TKThread, each an exit test (Support/MisuseAssertions.swift).
@Suite struct ThreadExitTests {
    @Test func exitWithAValueOnAnotherKindOfThreadStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKJoinableThread<Int>.exit(with: 1)
        }
        expectMisuse(result, mentions: ["TKJoinableThread<Int>.exit(with:)", "not a TKJoinableThread<Int>", "Fix:"])
    }

    @Test func makingAStartedDetachedThreadJoinableStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let worker = TKThread(name: "worker") { TKThread.sleep(for: .seconds(3600)) }
            worker.start()
            worker.isDetached = false
        }
        expectMisuse(result, mentions: ["TKThread \"worker\".isDetached = false after start()", "Fix:"])
    }

    @Test func startingTwiceStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let worker = TKThread(name: "worker") {}
            worker.start()
            worker.start()
        }
        expectMisuse(result, mentions: ["ThreadKit misuse: TKThread \"worker\".start() called again"])
    }
}
