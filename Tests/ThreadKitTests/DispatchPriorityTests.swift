// Dispatch priorities in the order Apple gives them, judged by counting what ran: libdispatch's
// priority program (tests/dispatch_priority.c: blocks at the four legacy priorities saturate the
// pool, completions are counted per level) with short blocks and with blocks longer than every
// aging time (which once inverted the order), background progress under saturation, the legacy
// priorities and `.unspecified` mapped as Apple maps them. Completion is judged with Foundation's
// DispatchSemaphore and Synchronization atomics, not with ThreadKit's primitives.
import Dispatch
import Foundation
import Synchronization
@_spi(Benchmarks) import ThreadKit
import XCTest

final class DispatchPriorityTests: XCTestCase {
    private static let priorities: [TKDispatchQueue.GlobalQueuePriority] = [.background, .low, .default, .high]

    /// Submits `perLevel` blocks at each legacy priority (high first, as a saturated pool would
    /// see them queued), each spinning `block` of wall time; counts completions per level until
    /// `total` blocks have completed, then lets the rest return at once. Returns
    /// [background, low, default, high].
    private func priorityProgram(block: Duration, total: Int, perLevel: Int) -> [Int] {
        let counts = CompletionCounts()
        let stop = Atomic<Bool>(false)
        let reachedTotal = DispatchSemaphore(value: 0)
        let allReturned = DispatchGroup()
        for level in (0..<4).reversed() {
            let queue = TKDispatchQueue.global(priority: DispatchPriorityTests.priorities[level])
            for _ in 0..<perLevel {
                allReturned.enter()
                queue.async {
                    defer { allReturned.leave() }
                    if stop.load(ordering: .relaxed) { return }
                    let end = ContinuousClock.now + block
                    while ContinuousClock.now < end { if stop.load(ordering: .relaxed) { return } }
                    if counts.record(level: level, total: total) {
                        stop.store(true, ordering: .relaxed)
                        reachedTotal.signal()
                    }
                }
            }
        }
        XCTAssertEqual(reachedTotal.wait(timeout: .now() + 120), .success, "the program never reached \(total) completions")
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(allReturned.wait(timeout: .now() + 60), .success)
        return counts.snapshot
    }

    private func assertOrdered(_ counts: [Int], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let shown = "background \(counts[0]), low \(counts[1]), default \(counts[2]), high \(counts[3])"
        print("priority program (\(what)): \(shown)")
        XCTAssertGreaterThan(counts[3], counts[2], "high did not beat default: \(shown)", file: file, line: line)
        XCTAssertGreaterThan(counts[2], counts[1], "default did not beat low: \(shown)", file: file, line: line)
        XCTAssertGreaterThan(counts[1], counts[0], "low did not beat background: \(shown)", file: file, line: line)
        XCTAssertGreaterThan(counts[0], 0, "background starved: \(shown)", file: file, line: line)
    }

    func testThePriorityProgramCountsMoreCompletionsForEachHigherPriority() {
        // 2 ms blocks. Expected shares (docs/DispatchPool.md): default about one start per 10 ms,
        // low per 20 ms, background per 40 ms, high the rest: each level about twice the next
        // lower one.
        // 300 rounds of the pool's width: 600 blocks, about 0.6 s, on 2 CPUs. A fixed 600 ran 37
        // rounds at width 16 (TK_CPU_BUDGET=16 on 2 cores): in 0.7 s under ThreadSanitizer the
        // nice-10 background worker, sharing 2 CPUs with 16 spinning normal workers, was never
        // scheduled twice (once to start a block, once 2 ms later to end it), and a CI run counted
        // background 0. As in the 45 ms program below, the CPU share decided, not the pool.
        let total = 300 * TKPoolIntrospection.width
        assertOrdered(priorityProgram(block: .milliseconds(2), total: total, perLevel: total + 50), "2 ms blocks")
    }

    func testBlocksLongerThanEveryAgingTimeDoNotInvertTheOrder() {
        // 45 ms blocks outlast every aging time (the longest, background's, is 40 ms): under the
        // old rule every pick found the lowest level aged and low finished more than default and
        // high. Now the count of more important starts decides: default gets one start per 9,
        // low one per 17, background one per 33 normal starts.
        // 70 rounds of the pool's width: about 3 s of wall time at any width. A fixed 140 ran 9
        // rounds at width 16 (TK_CPU_BUDGET=16 on 2 cores), too short for a nice-10 background
        // worker sharing 2 CPUs with 16 spinning normal workers to be scheduled twice (once to
        // start its block, once 45 ms later to end it): the CPU share, not the pool, decided.
        let total = 70 * TKPoolIntrospection.width
        assertOrdered(priorityProgram(block: .milliseconds(45), total: total, perLevel: total + 20), "45 ms blocks")
    }

    func testBackgroundWorkProgressesWhileEveryNormalLevelIsSaturated() {
        let stop = Atomic<Bool>(false)
        let backlogStarted = Atomic<Int>(0)
        let allReturned = DispatchGroup()
        let perLevel = 400
        for qos in [TKQualityOfService.userInteractive, .userInitiated, .default, .utility] {
            for _ in 0..<perLevel {
                allReturned.enter()
                TKDispatchQueue.global(qos: qos).async {
                    defer { allReturned.leave() }
                    if stop.load(ordering: .relaxed) { return }
                    backlogStarted.wrappingAdd(1, ordering: .relaxed)
                    let end = ContinuousClock.now + .milliseconds(5)
                    while ContinuousClock.now < end, !stop.load(ordering: .relaxed) {}
                }
            }
        }
        let backgroundRan = DispatchSemaphore(value: 0)
        let startedWhenBackgroundFinished = Atomic<Int>(-1)
        let backgroundItems = 3
        let backgroundDone = Atomic<Int>(0)
        for _ in 0..<backgroundItems {
            TKDispatchQueue.global(qos: .background).async {
                if backgroundDone.wrappingAdd(1, ordering: .relaxed).newValue == backgroundItems {
                    startedWhenBackgroundFinished.store(backlogStarted.load(ordering: .relaxed), ordering: .relaxed)
                    backgroundRan.signal()
                }
            }
        }
        XCTAssertEqual(backgroundRan.wait(timeout: .now() + 30), .success, "background work starved")
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(allReturned.wait(timeout: .now() + 60), .success)
        let seen = startedWhenBackgroundFinished.load(ordering: .relaxed)
        XCTAssertLessThan(seen, 4 * perLevel, "background ran only after the whole higher backlog (\(seen) started)")
    }

    // MARK: Legacy priorities and .unspecified

    func testLegacyPrioritiesAreTheGlobalQueuesAppleMapsThemTo() {
        XCTAssertTrue(TKDispatchQueue.global(priority: .high) === TKDispatchQueue.global(qos: .userInitiated))
        XCTAssertTrue(TKDispatchQueue.global(priority: .default) === TKDispatchQueue.global(qos: .default))
        XCTAssertTrue(TKDispatchQueue.global(priority: .low) === TKDispatchQueue.global(qos: .utility))
        XCTAssertTrue(TKDispatchQueue.global(priority: .background) === TKDispatchQueue.global(qos: .background))
        XCTAssertEqual(
            TKDispatchQueue.GlobalQueuePriority.allCases.map(\.qualityOfService),
            [.userInitiated, .default, .utility, .background])
    }

    func testUnspecifiedIsTheDefaultGlobalQueueAndAQueueWithItTakesItsTargetsLevel() {
        XCTAssertTrue(TKDispatchQueue.global(qos: .unspecified) === TKDispatchQueue.global(qos: .default))
        XCTAssertEqual(TKQualityOfService.unspecified.rawValue, 0) // QOS_CLASS_UNSPECIFIED
        XCTAssertLessThan(TKQualityOfService.unspecified, .background)
        let key = TKDispatchSpecificKey<String>()
        let globals: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]
        for qos in globals { TKDispatchQueue.global(qos: qos).setSpecific(key: key, value: "\(qos)") }
        defer { for qos in globals { TKDispatchQueue.global(qos: qos).setSpecific(key: key, value: nil) } }
        let plain = TKDispatchQueue(label: "unspecified", qos: .unspecified)
        XCTAssertEqual(plain.sync { TKDispatchQueue.getSpecific(key: key) }, "default")
        let onUtility = TKDispatchQueue(label: "unspecified-on-utility", qos: .unspecified, target: .global(qos: .utility))
        XCTAssertEqual(onUtility.sync { TKDispatchQueue.getSpecific(key: key) }, "utility")
    }

    func testAThreadWithUnspecifiedQualityOfServiceRunsAtTheDefaultNiceValue() {
        let nice = Atomic<Int32>(-100)
        let thread = TKThread(name: "unspecified-qos") {
            errno = 0
            nice.store(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0), ordering: .relaxed)
        }
        thread.qualityOfService = .unspecified
        XCTAssertEqual(thread.qualityOfService, .unspecified)
        thread.isDetached = false
        thread.start()
        XCTAssertTrue(thread.join(until: .now + .seconds(30)))
        XCTAssertEqual(nice.load(ordering: .relaxed), 0)
    }
}

/// Completions per level, and the moment the program's total is reached.
private final class CompletionCounts: Sendable {
    private let background = Atomic<Int>(0), low = Atomic<Int>(0), normal = Atomic<Int>(0), high = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)

    /// Counts one completion at `level` if the total is not reached yet; true for the last one.
    func record(level: Int, total: Int) -> Bool {
        let n = completed.wrappingAdd(1, ordering: .relaxed).newValue
        guard n <= total else { return false }
        switch level {
        case 0: background.wrappingAdd(1, ordering: .relaxed)
        case 1: low.wrappingAdd(1, ordering: .relaxed)
        case 2: normal.wrappingAdd(1, ordering: .relaxed)
        default: high.wrappingAdd(1, ordering: .relaxed)
        }
        return n == total
    }

    var snapshot: [Int] {
        [background.load(ordering: .relaxed), low.load(ordering: .relaxed), normal.load(ordering: .relaxed), high.load(ordering: .relaxed)]
    }
}
