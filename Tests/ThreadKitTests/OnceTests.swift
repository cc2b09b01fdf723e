// TKOnce: the body runs exactly once under a race, later callers see its effects, and callers that
// arrive while it runs wait for it to finish.
import Foundation
import Synchronization
import ThreadKit
import XCTest

final class OnceTests: XCTestCase {
    /// TKOnce is non-copyable: a class holds it so threads can share it.
    private final class OnceBox: Sendable { let once = TKOnce() }

    func testBodyRunsExactlyOnceWhenEightThreadsRace() {
        for round in 0..<stress(200) {
            let box = OnceBox()
            let runs = Atomic<Int>(0)
            let racers = TestThread.spawn(8, "racer") { _ in
                box.once.run { runs.wrappingAdd(1, ordering: .relaxed) }
            }
            XCTAssertTrue(joinAll(racers), "round \(round): racers did not finish")
            XCTAssertEqual(runs.load(ordering: .relaxed), 1, "round \(round): the body ran \(runs.load(ordering: .relaxed)) times")
        }
    }

    func testLateCallersSeeTheBodysEffects() {
        let box = OnceBox()
        let effect = Shared<[Int]>([]) // written only by the body; read after run returns
        box.once.run { effect.value = [1, 2, 3] }
        let seen = Atomic<Int>(0)
        let extraRuns = Atomic<Int>(0)
        let late = TestThread.spawn(4, "late") { _ in
            box.once.run { extraRuns.wrappingAdd(1, ordering: .relaxed) }
            if effect.value == [1, 2, 3] { seen.wrappingAdd(1, ordering: .relaxed) }
        }
        XCTAssertTrue(joinAll(late))
        XCTAssertEqual(extraRuns.load(ordering: .relaxed), 0, "a late caller ran the body again")
        XCTAssertEqual(seen.load(ordering: .relaxed), 4, "a late caller did not see the body's effects")
    }

    func testCallersArrivingDuringASlowBodyWaitForIt() {
        let box = OnceBox()
        let effect = Shared(0) // written only by the body; read after run returns
        let bodyStarted = Flag()
        let finishBody = Flag()
        let runner = TestThread("runner") {
            box.once.run {
                bodyStarted.set()
                _ = finishBody.wait(until: .now + .seconds(60))
                effect.value = 1
            }
        }
        XCTAssertTrue(bodyStarted.wait())
        let returned = Atomic<Int>(0)
        let sawEffect = Atomic<Int>(0)
        let extraRuns = Atomic<Int>(0)
        let callers = (0..<3).map { index in
            TestThread("caller-\(index)") {
                box.once.run { extraRuns.wrappingAdd(1, ordering: .relaxed) }
                returned.wrappingAdd(1, ordering: .relaxed)
                if effect.value == 1 { sawEffect.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        // Every caller is asleep inside run() while the body is still running.
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { callers.allSatisfy(\.isParked) }, "the callers never blocked")
        usleep(50_000) // the body stays slow a while longer: no caller may return meanwhile
        XCTAssertEqual(returned.load(ordering: .relaxed), 0, "a caller returned while the body was still running")
        finishBody.set()
        XCTAssertTrue(joinAll(callers + [runner]))
        XCTAssertEqual(returned.load(ordering: .relaxed), 3)
        XCTAssertEqual(sawEffect.load(ordering: .relaxed), 3, "a caller returned before the body's effect was visible")
        XCTAssertEqual(extraRuns.load(ordering: .relaxed), 0, "a waiting caller ran the body again")
    }
}
