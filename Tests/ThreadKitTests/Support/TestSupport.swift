// TestSupport: small helpers shared by the tests. They are independent of ThreadKit (Foundation
// threads, Synchronization atomics, /proc), so a broken ThreadKit primitive cannot hide its own
// failure. Every wait takes a deadline: a hang fails the test instead of stalling the run.
import Foundation
import Synchronization

/// `n` scaled by the TK_STRESS environment variable (default 1; fractions allowed), and divided by
/// 10 under ThreadSanitizer, which makes every operation 5–15 times slower. Never below 1.
func stress(_ n: Int) -> Int {
    let factor = ProcessInfo.processInfo.environment["TK_STRESS"].flatMap(Double.init) ?? 1
    return max(1, Int(Double(n) * factor / (underThreadSanitizer ? 10 : 1)))
}

/// Whether this process runs with ThreadSanitizer (its runtime exports `__tsan_init`).
let underThreadSanitizer = dlsym(nil, "__tsan_init") != nil

/// Polls `condition` until it holds (true) or `deadline` passes (false). Yields between polls, then
/// backs off to short sleeps so a long wait does not take a core from the threads under test.
@discardableResult
func waitUntil(_ deadline: ContinuousClock.Instant, _ condition: () -> Bool) -> Bool {
    var polls = 0
    while !condition() {
        if ContinuousClock.now >= deadline { return condition() }
        polls += 1
        if polls < 100 { sched_yield() } else { usleep(polls < 1_000 ? 50 : 500) }
    }
    return true
}

/// A reusable barrier for `parties` threads that spins (then yields) instead of sleeping, so the
/// threads leave it within a few hundred nanoseconds of each other: a start gate for races, and a
/// per-iteration barrier for litmus tests.
final class SpinBarrier: Sendable {
    private let parties: Int
    private let arrived = Atomic<Int>(0)
    private let generation = Atomic<Int>(0)

    init(parties: Int) { self.parties = parties }

    /// Returns once all `parties` threads have arrived; false if `deadline` passed first.
    @discardableResult
    func arriveAndWait(deadline: ContinuousClock.Instant = .now + .seconds(30)) -> Bool {
        // Read the generation before arriving: the last arriver bumps it after resetting `arrived`.
        let current = generation.load(ordering: .acquiring)
        if arrived.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == parties {
            arrived.store(0, ordering: .relaxed)
            generation.wrappingAdd(1, ordering: .releasing) // pairs with the acquiring loads below
            return true
        }
        var spins = 0
        while generation.load(ordering: .acquiring) == current {
            spins += 1
            if spins & 0xFF == 0 {
                sched_yield()
                if spins & 0xFFFF == 0, ContinuousClock.now >= deadline { return false }
            }
        }
        return true
    }
}

/// A one-shot event: set once by one thread, waited for (with a deadline) by others. Setting
/// publishes the setter's earlier writes to a waiter that sees it set.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)

    init() {}

    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }

    /// True once set; false if `deadline` passed first.
    func wait(until deadline: ContinuousClock.Instant = .now + .seconds(30)) -> Bool {
        waitUntil(deadline) { isSet }
    }
}

/// A Foundation thread started at once, that can be joined with a deadline and whose kernel
/// thread id is known (to read its state in /proc).
final class TestThread: Sendable {
    private let finished = Atomic<Bool>(false)
    private let tid = Atomic<Int32>(0)

    init(_ name: String = "test", _ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [self] in
            tid.store(KernelThread.currentID(), ordering: .releasing)
            body()
            finished.store(true, ordering: .releasing) // pairs with `join`: publishes the body's writes
        }
        thread.name = name
        thread.start()
    }

    /// Starts `count` threads running `body(index)`, released together by a spin barrier.
    static func spawn(_ count: Int, _ name: String = "test", _ body: @escaping @Sendable (Int) -> Void) -> [TestThread] {
        let gate = SpinBarrier(parties: count)
        return (0..<count).map { index in
            TestThread("\(name)-\(index)") {
                gate.arriveAndWait()
                body(index)
            }
        }
    }

    /// Whether the body has returned.
    var isFinished: Bool { finished.load(ordering: .acquiring) }

    /// Waits until the body has returned: true, or false if `deadline` passed first.
    @discardableResult
    func join(until deadline: ContinuousClock.Instant = .now + .seconds(30)) -> Bool {
        waitUntil(deadline) { isFinished }
    }

    /// The thread's kernel id (waits for the thread to start).
    var kernelID: Int32 {
        _ = waitUntil(.now + .seconds(30)) { tid.load(ordering: .acquiring) != 0 }
        return tid.load(ordering: .acquiring)
    }

    /// Whether the thread is asleep in a futex wait: the only way a ThreadKit primitive blocks.
    var isParked: Bool { KernelThread.isParkedInFutex(kernelID) }
}

/// Joins every thread; true if all finished before `deadline`.
@discardableResult
func joinAll(_ threads: [TestThread], until deadline: ContinuousClock.Instant = .now + .seconds(30)) -> Bool {
    threads.allSatisfy { $0.join(until: deadline) }
}

/// Facts about kernel threads of this process, read from /proc.
enum KernelThread {
    /// The calling thread's kernel id, from the /proc/thread-self link ("<pid>/task/<tid>").
    static func currentID() -> Int32 {
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard length > 0 else { return -1 }
        let link = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return link.split(separator: "/").last.flatMap { Int32($0) } ?? -1
    }

    /// The scheduler state letter of thread `tid` ("R" running, "S" sleeping, …), nil if gone.
    static func state(_ tid: Int32) -> Character? {
        guard let stat = read("/proc/self/task/\(tid)/stat"),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Format: "tid (name) S …"; the name may contain spaces or parentheses, hence lastIndex.
        return stat[stat.index(after: close)...].first { $0 != " " }
    }

    /// Whether thread `tid` sleeps in the kernel's futex wait.
    static func isParkedInFutex(_ tid: Int32) -> Bool {
        state(tid) == "S" && (read("/proc/self/task/\(tid)/wchan")?.contains("futex") ?? false)
    }

    /// The names (`comm`, cut by the kernel to 15 bytes) of the process's threads alive now.
    static func names() -> [String] {
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        // comm ends in a newline, which is not part of the name.
        return tids.compactMap { read("/proc/self/task/\($0)/comm")?.trimmingCharacters(in: .newlines) }
    }

    private static func read(_ path: String) -> String? {
        try? String(contentsOfFile: path, encoding: .utf8)
    }
}

/// Lifetime checks: `make` builds the objects under test, hands the ones that must go away to
/// `watch` (held weakly), and drops its own references when it returns; the returned strings name
/// the watched objects still alive after `deadline` (release may happen on another thread, e.g. as
/// a thread exits, so it is awaited, never slept for).
final class Freed: @unchecked Sendable {
    private let watched = Guarded<[(String, () -> AnyObject?)]>([])

    func watch(_ name: String, _ object: AnyObject) {
        watched.withLock { [weak object] in $0.append((name, { object })) }
    }

    static func alive(until deadline: ContinuousClock.Instant = .now + .seconds(30), _ make: (Freed) -> Void) -> [String] {
        let freed = Freed()
        make(freed)
        _ = waitUntil(deadline) { freed.watched.withLock { $0.allSatisfy { $0.1() == nil } } }
        return freed.watched.withLock { $0.filter { $0.1() != nil }.map(\.0) }
    }
}
