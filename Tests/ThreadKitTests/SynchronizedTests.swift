import Foundation
import Synchronization
import XCTest

// synchronized(token): one recursive lock per token identity. Same token excludes, different
// tokens do not block each other, nesting, errors release and propagate, return values, and the
// token table shrinks back to empty; tokens crowding one stripe (more than its sticky slots, so
// slots are rebound and overflow entries made) still exclude per token and never across tokens.
@testable import ThreadKit

final class SynchronizedTests: XCTestCase {
    private final class Token: @unchecked Sendable {}
    private struct Boom: Error, Equatable { let code: Int }

    func testSameTokenExcludes() {
        let token = Token()
        let counter = Shared(0) // guarded by synchronized(token)
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let perThread = stress(100_000)
        let workers = TestThread.spawn(2, "sync") { _ in
            for _ in 0..<perThread {
                synchronized(token) {
                    if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlaps.wrappingAdd(1, ordering: .relaxed) }
                    counter.value += 1
                    inside.wrappingSubtract(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
        XCTAssertEqual(counter.value, 2 * perThread, "increments were lost")
        XCTAssertEqual(overlaps.load(ordering: .relaxed), 0, "two threads were inside synchronized(token) at once")
    }

    func testDifferentTokensDoNotBlockEachOther() {
        let held = Token()
        // More tokens than the table has stripes, so some share a stripe with `held`.
        let others = (0..<200).map { _ in Token() }
        let aInside = Flag()
        let bDone = Flag()
        let bodyCompleted = Atomic<Bool>(false)
        let a = TestThread("A") {
            synchronized(held) {
                aInside.set()
                // Only B can set this, and B sets it from inside synchronized(other tokens).
                bodyCompleted.store(bDone.wait(until: .now + .seconds(30)), ordering: .relaxed)
            }
        }
        let b = TestThread("B") {
            guard aInside.wait() else { return }
            for token in others { synchronized(token) {} }
            synchronized(others[0]) { bDone.set() }
        }
        XCTAssertTrue(joinAll([a, b], until: .now + .seconds(60)))
        XCTAssertTrue(bodyCompleted.load(ordering: .relaxed), "synchronized on other tokens blocked behind a held token")
    }

    func testNestingOnTheSameTokenOnOneThread() {
        let token = Token()
        let depth = Atomic<Int>(0)
        // On a thread of its own, so a deadlock fails the test instead of hanging it.
        let nester = TestThread("nester") {
            synchronized(token) {
                synchronized(token) {
                    synchronized(token) { depth.store(3, ordering: .relaxed) }
                }
            }
        }
        XCTAssertTrue(nester.join(), "nested synchronized on the same token deadlocked")
        XCTAssertEqual(depth.load(ordering: .relaxed), 3)
        let other = TestThread("other") { synchronized(token) {} }
        XCTAssertTrue(other.join(), "the token stayed locked after the nested bodies returned")
    }

    /// Deep nesting on one token (the fast path's re-entry: no atomic, the depth counted) keeps
    /// another thread out until the outermost body returns (it parks, pinning the slot), and the
    /// outermost release lets it in.
    func testDeepNestingExcludesOtherThreadsUntilTheOutermostBodyReturns() {
        let token = Token()
        let outerLevel = 200
        let otherGotIn = Atomic<Bool>(false)
        let sawOtherInside = Atomic<Bool>(false)
        let other = Shared<TestThread?>(nil) // written and read by the nester only, then joined
        @Sendable func nest(_ level: Int) -> Int {
            synchronized(token) {
                if level == 0 {
                    other.value = TestThread("other") { synchronized(token) { otherGotIn.store(true, ordering: .relaxed) } }
                    Thread.sleep(forTimeInterval: 0.05)
                    if otherGotIn.load(ordering: .relaxed) { sawOtherInside.store(true, ordering: .relaxed) }
                    return 0
                }
                let inner = nest(level - 1)
                if level == outerLevel { // every inner level has returned; the outermost still holds it
                    Thread.sleep(forTimeInterval: 0.05)
                    if otherGotIn.load(ordering: .relaxed) { sawOtherInside.store(true, ordering: .relaxed) }
                }
                return inner + 1
            }
        }
        let nester = TestThread("nester") { XCTAssertEqual(nest(outerLevel), outerLevel) }
        XCTAssertTrue(nester.join(), "deep nesting on one token deadlocked")
        XCTAssertFalse(sawOtherInside.load(ordering: .relaxed), "another thread took the token while it was held")
        XCTAssertTrue(other.value?.join() ?? false, "the token stayed locked after the nested bodies returned")
        XCTAssertTrue(otherGotIn.load(ordering: .relaxed))
    }

    func testThrowingBodyReleasesTheLockAndPropagatesTheError() {
        let token = Token()
        XCTAssertThrowsError(try synchronized(token) { () throws -> Int in throw Boom(code: 42) }) { error in
            XCTAssertEqual(error as? Boom, Boom(code: 42))
        }
        let other = TestThread("other") { synchronized(token) {} }
        XCTAssertTrue(other.join(), "another thread could not take the token after the body threw")
        XCTAssertEqual(SyncTable.shared.count, 0, "the thrown-out entry stayed in the table")
    }

    func testReturnsTheBodyValue() {
        let token = Token()
        XCTAssertEqual(synchronized(token) { 42 }, 42)
        XCTAssertEqual(synchronized(token) { "value" }, "value")
        let pair = synchronized(token) { (1, [2, 3]) }
        XCTAssertEqual(pair.0, 1)
        XCTAssertEqual(pair.1, [2, 3])
        XCTAssertEqual(synchronized(token) { synchronized(token) { 7 } + 1 }, 8)
    }

    func testTableDoesNotGrowWithShortLivedTokens() {
        // Batches of live tokens, so identities are distinct and not only one reused address.
        for _ in 0..<max(1, stress(100_000) / 1_000) {
            let tokens = (0..<1_000).map { _ in Token() }
            for token in tokens { synchronized(token) {} }
        }
        let insideCount = synchronized(Token()) { SyncTable.shared.count }
        XCTAssertEqual(insideCount, 1, "a held token must have exactly one entry")
        XCTAssertEqual(SyncTable.shared.count, 0, "the table kept entries for tokens nobody uses")
        XCTAssertLessThanOrEqual(SyncTable.shared.capacity, 64 * 5, "slots beyond the spares were kept")
    }

    /// Live tokens that fall into the same stripe of the table, more than it has sticky slots.
    private func tokensSharingAStripe(_ count: Int) -> [Token] {
        var byStripe: [Int: [Token]] = [:]
        var keep: [Token] = []
        while true {
            let token = Token()
            keep.append(token)
            let stripe = Int((UInt(bitPattern: ObjectIdentifier(token)) >> 4) & 63)
            byStripe[stripe, default: []].append(token)
            if byStripe[stripe]!.count == count { return byStripe[stripe]! }
        }
    }

    func testManyTokensOfOneStripeHeldAtOnceEachExcludeOnlyTheirOwn() {
        let tokens = tokensSharingAStripe(3 * SyncTable.slotsPerStripe)
        let holding = Flag()
        let release = DispatchSemaphore(value: 0)
        let holder = TestThread {
            func nest(_ i: Int) {
                guard i < tokens.count else {
                    holding.set()
                    release.wait()
                    return
                }
                synchronized(tokens[i]) { nest(i + 1) }
            }
            nest(0)
        }
        XCTAssertTrue(holding.wait())
        XCTAssertEqual(SyncTable.shared.count, tokens.count, "each held token must have exactly one entry")
        // Another thread is kept out of every one of them, and gets an unrelated token at once.
        let entered = Atomic<Int>(0)
        let other = TestThread {
            synchronized(Token()) {}
            for token in tokens { synchronized(token) { _ = entered.wrappingAdd(1, ordering: .relaxed) } }
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { other.isParked })
        XCTAssertEqual(entered.load(ordering: .relaxed), 0, "entered a token another thread holds")
        release.signal()
        XCTAssertTrue(joinAll([holder, other]))
        XCTAssertEqual(entered.load(ordering: .relaxed), tokens.count)
        XCTAssertEqual(SyncTable.shared.count, 0)
    }

    func testTokensCrowdingOneStripeLoseNoIncrementsUnderContention() {
        let tokens = tokensSharingAStripe(2 * SyncTable.slotsPerStripe + 1)
        let counters = tokens.map { _ in Shared(0) } // each guarded by synchronized(its token)
        let rounds = stress(20_000)
        let workers = TestThread.spawn(4, "crowd") { w in
            var state = UInt64(w + 1)
            for _ in 0..<rounds {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let x = Int(state >> 33) % tokens.count
                let y = Int(state >> 13) % tokens.count
                let (a, b) = (min(x, y), max(x, y)) // one lock order: nesting in any order could deadlock
                synchronized(tokens[a]) {
                    counters[a].value += 1
                    synchronized(tokens[b]) { if b != a { counters[b].value += 1 } }
                }
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
        // Every round adds 1 to a and 1 to b when they differ; count them independently.
        var expected = Array(repeating: 0, count: tokens.count)
        for w in 0..<4 {
            var state = UInt64(w + 1)
            for _ in 0..<rounds {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let x = Int(state >> 33) % tokens.count
                let y = Int(state >> 13) % tokens.count
                let (a, b) = (min(x, y), max(x, y))
                expected[a] += 1
                if b != a { expected[b] += 1 }
            }
        }
        XCTAssertEqual(counters.map { $0.value }, expected, "increments were lost")
        XCTAssertEqual(SyncTable.shared.count, 0)
    }
}
