import Foundation
import Synchronization
import XCTest

// RunLoopReadyListTests: a pass visits the version-0 sources that were signalled, not every source
// its mode holds (docs/RunLoopIteration.md, "Ready sources"), and the ready lists keep CFRunLoop's
// rules: `order` then insertion, a signal made before a source joins a mode, a source in several
// modes performed by whichever pass comes first, a removed source never performed there. Costs
// are counted (the loop's visit counter), never timed.
@testable import ThreadKit

final class RunLoopReadyListTests: XCTestCase {
    let custom: TKRunLoop.Mode = "ready-list"

    func testAPassVisitsOnlySignalledSourcesBesideTenThousandIdleOnes() {
        let worker = LoopThread()
        defer { worker.finish() }
        let loop = worker.loop
        let idle = (0..<10_000).map { _ in TKRunLoopSource {} }
        for source in idle { loop.add(source, forMode: .default) }
        let performed = DispatchSemaphore(value: 0)
        let busy = TKRunLoopSource { performed.signal() }
        loop.add(busy, forMode: .default)
        let rounds = 200
        let visitedBefore = loop.sourcesVisited.load(ordering: .relaxed)
        for _ in 0..<rounds {
            busy.signal()
            loop.wakeUp()
            XCTAssertEqual(performed.wait(timeout: .now() + 30), .success)
        }
        // The counter is written on the loop's thread; a perform round trip orders it before us.
        let done = DispatchSemaphore(value: 0)
        loop.perform { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        let visited = loop.sourcesVisited.load(ordering: .relaxed) - visitedBefore
        XCTAssertGreaterThanOrEqual(visited, rounds, "each perform is a visit")
        XCTAssertLessThanOrEqual(visited, rounds, "passes visited idle sources: \(visited) visits for \(rounds) signals")
        for source in idle { source.invalidate() }
        busy.invalidate()
    }

    func testSignalledSourcesPerformByOrderThenInsertionWhateverTheSignalOrder() {
        let loop = TKRunLoop.current
        let log = Shared<[String]>([])
        let specs: [(String, Int)] = [("a", 2), ("b", 0), ("c", 1), ("d", 0), ("e", 2), ("f", -1)]
        let sources = specs.map { name, order in TKRunLoopSource(order: order) { log.value.append(name) } }
        for s in sources { loop.add(s, forMode: custom) }
        for s in sources.reversed() { s.signal() }
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        XCTAssertEqual(log.value, ["f", "b", "d", "c", "a", "e"])
        // Removed and added again, a source goes after the others of its order.
        loop.remove(sources[1], forMode: custom)
        loop.add(sources[1], forMode: custom)
        log.value = []
        for s in sources { s.signal() }
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(log.value, ["f", "d", "b", "c", "a", "e"])
        for s in sources { s.invalidate() }
    }

    func testASourceSignalledBeforeJoiningAModePerformsThere() {
        let loop = TKRunLoop.current
        let ran = Shared(0)
        let source = TKRunLoopSource { ran.value += 1 }
        source.signal()
        loop.add(source, forMode: custom)
        XCTAssertEqual(loop.run(mode: custom, for: .seconds(30), returnAfterSourceHandled: true), .handledSource)
        XCTAssertEqual(ran.value, 1)
        // A common mode added later: the common source joins it already signalled.
        let laterCommon: TKRunLoop.Mode = "ready-list-common"
        let common = TKRunLoopSource { ran.value += 10 }
        loop.add(common, forMode: .common)
        common.signal()
        loop.addCommonMode(laterCommon)
        loop.run(mode: laterCommon, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, 11)
        source.invalidate()
        common.invalidate()
    }

    func testASourceInTwoModesPerformsOncePerSignalInWhicheverRunsFirst() {
        let loop = TKRunLoop.current
        let other: TKRunLoop.Mode = "ready-list-other"
        let ran = Shared<[String]>([])
        let source = TKRunLoopSource { ran.value.append(TKRunLoop.current.currentMode?.rawValue ?? "?") }
        loop.add(source, forMode: custom)
        loop.add(source, forMode: other)
        source.signal()
        loop.run(mode: other, for: .zero, returnAfterSourceHandled: false)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false) // its entry there is stale
        XCTAssertEqual(ran.value, [other.rawValue])
        source.signal()
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        loop.run(mode: other, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, [other.rawValue, custom.rawValue])
        source.invalidate()
    }

    func testASourceRemovedAfterItsSignalDoesNotPerformThereUntilAddedAgain() {
        let loop = TKRunLoop.current
        let ran = Shared(0)
        let keep = TKRunLoopSource {}
        loop.add(keep, forMode: custom)
        let source = TKRunLoopSource { ran.value += 1 }
        loop.add(source, forMode: custom)
        source.signal()
        loop.remove(source, forMode: custom)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, 0, "a source removed from the mode performed there")
        XCTAssertTrue(source.isSignaled, "the signal waits for a mode that holds the source")
        loop.add(source, forMode: custom)
        loop.run(mode: custom, for: .zero, returnAfterSourceHandled: false)
        XCTAssertEqual(ran.value, 1)
        source.invalidate()
        keep.invalidate()
    }

    /// A signal from another thread racing the source's addition is never lost: the source is
    /// on the ready list afterwards whichever came first.
    func testSignalsRacingAdditionAreNeverLost() {
        let worker = LoopThread()
        defer { worker.finish() }
        let loop = worker.loop
        let rounds = stress(2_000)
        let performed = JudgedCounter()
        for i in 0..<rounds {
            let source = TKRunLoopSource { performed.add() }
            let go = DispatchSemaphore(value: 0)
            let sent = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                go.wait()
                source.signal()
                loop.wakeUp()
                sent.signal()
            }
            go.signal()
            loop.add(source, forMode: .default)
            sent.wait()
            loop.wakeUp()
            XCTAssertTrue(waitUntil(.now + .seconds(30)) { performed.count == i + 1 }, "round \(i): the signal was lost")
            source.invalidate()
        }
    }
}
