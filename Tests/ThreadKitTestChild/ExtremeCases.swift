// ExtremeCases: the cases of `ThreadKitTestChild extreme CASE` (see ExtremeInputRoles.swift). Each
// drives one public call with extreme input and returns a line saying what ThreadKit did; a case
// that sees wrong behaviour (rather than a crash) exits with status 1 through `fail`.
import ChildProcessRoles
import Glibc
import ThreadKit

enum ExtremeCases {
    static let all: [ExtremeCase] = threads + timers + dispatch + waits + others

    static func fail(_ what: String) -> Never {
        Console.err("extreme: \(what)")
        exit(1)
    }

    // MARK: Threads

    static let threads: [ExtremeCase] = [
        ExtremeCase(name: "stack-size-int-max") {
            var thrown: [String] = []
            for bytes in [Int.max, Int.min, -1, 0, Int.max - 4096, 16_383] {
                do {
                    try TKThread {}.setStackSize(bytes)
                    fail("setStackSize(\(bytes)) was accepted")
                } catch let error as TKError {
                    thrown.append("\(bytes): \(error.code)")
                } catch { fail("\(error)") }
            }
            return thrown.joined(separator: ", ")
        },
        ExtremeCase(name: "stack-size-huge-start") {
            // A multiple of 4 KiB no OS can map: start fails, start(throwing) says so.
            let thread = TKThread {}
            do { try thread.setStackSize(Int.max & ~4095) } catch { return "refused at setStackSize: \(error)" }
            do {
                try thread.startOrThrow()
                fail("a thread with an Int.max stack started")
            } catch let error as TKError {
                return "start threw \(error.code) errno \(error.errno.map(String.init) ?? "nil")"
            } catch { fail("\(error)") }
        },
        ExtremeCase(name: "thread-priority-nan") {
            let thread = TKThread.current
            var results: [Bool] = []
            for p in [Double.nan, .infinity, -.infinity, .greatestFiniteMagnitude, -Double.greatestFiniteMagnitude] {
                results.append(thread.setThreadPriority(p))
            }
            return "priority \(thread.threadPriority) after \(results)"
        },
        ExtremeCase(name: "sleep-extremes") {
            TKThread.sleep(until: Extreme.farPast)
            TKThread.sleep(for: .zero - Extreme.huge - Extreme.huge)
            TKThread.sleep(for: .zero)
            return "returned at once"
        },
    ]

    // MARK: Timers

    static let timers: [ExtremeCase] = [
        ExtremeCase(name: "runloop-timer-far-past") {
            // A repeating timer whose first fire date is more than Int.max intervals ago.
            let loop = TKRunLoop.current
            let fires = SharedCount()
            let timer = TKTimer(fireAt: Extreme.farPast, interval: .microseconds(100), repeats: true) { t in
                if fires.increment() == 3 { t.invalidate() }
            }
            loop.add(timer, forMode: .default)
            let deadline = ContinuousClock.now + .seconds(30)
            while timer.isValid && ContinuousClock.now < deadline { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
            guard fires.value == 3 else { fail("fired \(fires.value) times") }
            return "fired 3 times, next slots after now"
        },
        ExtremeCase(name: "runloop-timer-intervals") {
            let loop = TKRunLoop.current
            var notes: [String] = []
            for interval in [Duration.zero, .zero - .seconds(5), .zero - Extreme.huge, Extreme.huge, Extreme.huge + Extreme.huge] {
                let fires = SharedCount()
                let timer = TKTimer(fireAt: .now, interval: interval, repeats: true) { _ in _ = fires.increment() }
                loop.add(timer, forMode: .default)
                let deadline = ContinuousClock.now + .seconds(30)
                while fires.value == 0 && ContinuousClock.now < deadline { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
                guard fires.value >= 1 else { fail("a timer with interval \(interval) never fired") }
                notes.append("\(timer.interval)")
                timer.invalidate()
            }
            // Non-repeating, far in the future, then far in the past.
            let later = TKTimer(fireAt: Extreme.farFuture, interval: Extreme.huge, repeats: false) { _ in }
            loop.add(later, forMode: .default)
            _ = loop.run(mode: .default, before: .now + .milliseconds(10))
            later.fireDate = Extreme.farPast
            later.tolerance = Extreme.huge + Extreme.huge
            let deadline = ContinuousClock.now + .seconds(30)
            while later.isValid && ContinuousClock.now < deadline { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
            guard !later.isValid else { fail("a timer moved to the far past never fired") }
            return "intervals \(notes)"
        },
        ExtremeCase(name: "runloop-run-extremes") {
            // Each run waits for a timer that stops it (timers do not end a run by themselves).
            let loop = TKRunLoop.current
            loop.add(TKTimer(interval: .milliseconds(1), repeats: false) { _ in loop.stop() }, forMode: .default)
            _ = loop.run(mode: .default, before: Extreme.farFuture)
            loop.add(TKTimer(interval: .milliseconds(1), repeats: false) { _ in loop.stop() }, forMode: .default)
            let result = loop.run(mode: .default, for: Extreme.huge + Extreme.huge, returnAfterSourceHandled: true)
            _ = loop.run(mode: .default, before: Extreme.farPast)
            loop.run(until: Extreme.farPast)
            return "run returned (\(result))"
        },
        ExtremeCase(name: "perform-after-delay-extremes") {
            let loop = TKRunLoop.current
            let ran = SharedCount()
            let key = "never"
            loop.perform(afterDelay: Extreme.huge + Extreme.huge, target: loop, key: key) { fail("a far-future request ran") }
            loop.perform(afterDelay: .zero - Extreme.huge - Extreme.huge) { _ = ran.increment() }
            let deadline = ContinuousClock.now + .seconds(30)
            while ran.value == 0 && ContinuousClock.now < deadline { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
            TKRunLoop.cancelPreviousPerformRequests(withTarget: loop)
            guard ran.value == 1 else { fail("the far-past request did not run") }
            return "far past ran, far future cancelled"
        },
        ExtremeCase(name: "source-timer-far-past") {
            let done = TKDispatchSemaphore(value: 0)
            let fires = SharedCount()
            let source = TKDispatchSource.makeTimerSource(queue: .global())
            source.schedule(deadline: Extreme.farPast, repeating: .microseconds(100))
            source.setEventHandler {
                if fires.increment() == 3 {
                    source.cancel()
                    done.signal()
                }
            }
            source.activate()
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("fired \(fires.value) times") }
            return "fired 3 times, data \(source.data)"
        },
        ExtremeCase(name: "source-timer-extremes") {
            let done = TKDispatchSemaphore(value: 0)
            let source = TKDispatchSource.makeTimerSource(queue: .global())
            source.schedule(deadline: .now, repeating: Extreme.huge + Extreme.huge)
            source.setEventHandler { done.signal() }
            source.activate()
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("never fired") }
            source.schedule(deadline: Extreme.farFuture, repeating: Extreme.huge, leeway: Extreme.huge + Extreme.huge)
            source.cancel()
            return "fired once, rescheduled far away, cancelled"
        },
        ExtremeCase(name: "async-after-extremes") {
            let done = TKDispatchSemaphore(value: 0)
            TKDispatchQueue.global().asyncAfter(deadline: Extreme.farFuture) { fail("a far-future block ran") }
            TKDispatchQueue.global().asyncAfter(deadline: .now + Extreme.huge) { fail("a far-future block ran") }
            TKDispatchQueue.global().asyncAfter(deadline: Extreme.farPast) { done.signal() }
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("the far-past block never ran") }
            // The manager armed its timer for the far future without trapping: one more near one.
            TKDispatchQueue.global().asyncAfter(deadline: .now + .milliseconds(1)) { done.signal() }
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("a near block never ran") }
            return "far past ran, far future pending"
        },
    ]

    // MARK: Dispatch counts

    static let dispatch: [ExtremeCase] = [
        ExtremeCase(name: "concurrent-perform-counts") {
            let ran = SharedCount()
            for n in [0, -1, Int.min] { TKDispatchQueue.concurrentPerform(iterations: n) { _ in _ = ran.increment() } }
            guard ran.value == 0 else { fail("\(ran.value) iterations ran") }
            TKDispatchQueue.concurrentPerform(iterations: 1) { _ in _ = ran.increment() }
            return "0, -1, Int.min ran nothing; 1 ran \(ran.value)"
        },
        ExtremeCase(name: "semaphore-int-max") {
            let s = TKDispatchSemaphore(value: Int.max)
            s.wait()
            s.signal()
            guard s.wait(until: .now) == .success else { fail("a unit was lost") }
            return "Int.max units: wait and signal balance"
        },
        ExtremeCase(name: "operation-queue-limits") {
            var notes: [String] = []
            for limit in [Int.max, 0, 1, -1] {
                let queue = TKOperationQueue()
                queue.maxConcurrentOperationCount = limit
                let ran = SharedCount()
                for _ in 0..<8 { queue.addOperation { _ = ran.increment() } }
                if limit == 0 {
                    guard queue.operationCount == 8 else { fail("limit 0 ran operations") }
                    queue.maxConcurrentOperationCount = Int.max
                }
                queue.waitUntilAllOperationsAreFinished()
                guard ran.value == 8 else { fail("limit \(limit): \(ran.value) of 8 ran") }
                notes.append("\(limit)")
            }
            return "limits \(notes) ran everything"
        },
        ExtremeCase(name: "dispatch-io-extremes") {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { fail("pipe") }
            let done = TKDispatchSemaphore(value: 0)
            let io = TKDispatchIO(type: .stream, fileDescriptor: fds[0], queue: .global()) { _ in done.signal() }
            io.setLimit(highWater: Int.max)
            io.setLimit(lowWater: Int.max)
            io.setLimit(highWater: Int.min)
            io.setLimit(lowWater: -1)
            io.setInterval(interval: Extreme.huge + Extreme.huge)
            io.setInterval(interval: .zero - Extreme.huge)
            let got = SharedCount()
            io.read(offset: 0, length: Int.max, queue: .global()) { isDone, data, _ in
                if let data { _ = got.add(data.count) }
                if isDone { done.signal() }
            }
            var bytes: [UInt8] = [1, 2, 3]
            _ = write(fds[1], &bytes, 3)
            close(fds[1])
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("the read never finished") }
            io.close()
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("the cleanup never ran") }
            return "read \(got.value) bytes of an Int.max read"
        },
        ExtremeCase(name: "dispatch-read-max-length") {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { fail("pipe") }
            var bytes: [UInt8] = [1, 2, 3]
            _ = write(fds[1], &bytes, 3)
            close(fds[1])
            let done = TKDispatchSemaphore(value: 0)
            let got = SharedCount()
            TKDispatchIO.read(fromFileDescriptor: fds[0], maxLength: Int.max, runningHandlerOn: .global()) { data, _ in
                _ = got.add(data.count)
                done.signal()
            }
            guard done.wait(until: .now + .seconds(30)) == .success else { fail("the read never finished") }
            return "read \(got.value) bytes"
        },
    ]

    // MARK: Waits with extreme deadlines

    static let waits: [ExtremeCase] = [
        ExtremeCase(name: "wait-far-future") {
            let tid = Extreme.currentTID
            let group = TKDispatchGroup()
            group.enter()
            Extreme.whenAsleep(tid) { group.leave() }
            guard group.wait(until: Extreme.farFuture) == .success else { fail("group wait timed out") }
            let semaphore = TKDispatchSemaphore(value: 0)
            Extreme.whenAsleep(tid) { semaphore.signal() }
            guard semaphore.wait(until: Extreme.farFuture) == .success else { fail("semaphore wait timed out") }
            let condition = TKCondition()
            let flag = SharedCount()
            Extreme.whenAsleep(tid) {
                condition.withLock {
                    _ = flag.increment()
                    condition.signal()
                }
            }
            condition.lock()
            while flag.value == 0 { _ = condition.wait(until: Extreme.farFuture) }
            condition.unlock()
            let lock = TKLock()
            let held = TKDispatchSemaphore(value: 0)
            let release = TKDispatchSemaphore(value: 0)
            let thread = TKThread {
                lock.lock()
                held.signal()
                Extreme.whenAsleep(tid) { release.signal() }
                release.wait()
                lock.unlock()
            }
            thread.start()
            held.wait()
            guard lock.lock(before: Extreme.farFuture) else { fail("lock(before:) timed out") }
            lock.unlock()
            guard thread.join(until: Extreme.farFuture) else { fail("join timed out") }
            return "group, semaphore, condition, lock and join waited until released"
        },
        ExtremeCase(name: "wait-far-past") {
            let group = TKDispatchGroup()
            group.enter()
            guard group.wait(until: Extreme.farPast) == .timedOut else { fail("group") }
            group.leave()
            guard TKDispatchSemaphore(value: 0).wait(until: Extreme.farPast) == .timedOut else { fail("semaphore") }
            let lock = TKLock()
            lock.lock()
            let other = TKThread { if lock.lock(before: Extreme.farPast) { fail("lock(before:) of a held lock") } }
            other.start()
            other.join()
            lock.unlock()
            let condition = TKCondition()
            condition.lock()
            _ = condition.wait(until: Extreme.farPast)
            condition.unlock()
            let blocked = TKThread { TKThread.sleep(for: .milliseconds(200)) }
            blocked.start()
            _ = blocked.join(until: Extreme.farPast)
            return "every wait returned at once"
        },
    ]

    // MARK: Ports, streams, atomics

    static let others: [ExtremeCase] = [
        ExtremeCase(name: "message-port-limits") {
            var notes: [String] = []
            for limit in [Int.max, 1] {
                let port = TKMessagePort(queueLimit: limit)
                notes.append("\(limit): \(port.queuedMessageCount)")
                port.invalidate()
            }
            return "queue limits \(notes)"
        },
        ExtremeCase(name: "bound-streams-sizes") {
            var notes: [String] = []
            for size in [1, Int.max] {
                let (input, output) = TKStream.getBoundStreams(withBufferSize: size)
                input.open()
                output.open()
                var byte: UInt8 = 7
                let wrote = output.write(&byte, maxLength: 1)
                var back: UInt8 = 0
                let read = input.read(&back, maxLength: Int.max)
                notes.append("\(size): wrote \(wrote) read \(read)")
                input.close()
                output.close()
            }
            return notes.joined(separator: "; ")
        },
        ExtremeCase(name: "atomic-wraparound") {
            let a = TKAtomicInt32(Int32.max)
            let b = TKAtomicInt64(Int64.max)
            let c = TKAtomicInt(Int.min)
            let r = (a.increment(), b.add(Int64.max), c.decrement())
            return "wrapped to \(r)"
        },
    ]
}

/// A counter shared by threads (a TKLock-guarded Int), for the cases' own bookkeeping.
final class SharedCount: @unchecked Sendable {
    private let lock = TKLock()
    private var count = 0 // guarded by lock
    var value: Int { lock.withLock { count } }
    @discardableResult func increment() -> Int { add(1) }
    @discardableResult func add(_ n: Int) -> Int {
        lock.withLock {
            count += n
            return count
        }
    }
}
