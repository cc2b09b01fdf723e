// The pool's staging (docs/DispatchPool.md, "Staging"): a submission that finds the pool's lock
// congested (threads asleep on it) is staged instead of waiting, and the lock's next holder moves
// it into the run queues. Judged by independent means: a pthread-mutex counter, Foundation's DispatchGroup and
// DispatchSemaphore, Foundation threads.
import Dispatch
import Foundation
import XCTest

@testable import ThreadKit

final class DispatchStagingTests: XCTestCase {
    /// With the pool's lock held by the test and another thread asleep on it, submissions from a
    /// third thread (normal and background) return at once; none runs until the lock is released,
    /// then each runs once.
    func testASubmissionNeverWaitsForACongestedPoolLockAndRunsOnceTheLockIsReleased() {
        let pool = DispatchPool.shared
        let ran = JudgedCounter()
        let done = DispatchGroup()
        let stagedBefore = pool.stage.stagedSoFar
        pool.lockPool()
        let sleeper = TestThread("sleeper") {
            pool.lockPool()
            pool.unlockPool()
        }
        XCTAssertTrue(waitUntil(.now + .seconds(30)) { sleeper.isParked && pool.lock.isCongested })
        let producer = TestThread("stager") {
            for qos in [TKQualityOfService.userInitiated, .default, .background] {
                for _ in 0..<10 {
                    done.enter()
                    TKDispatchQueue.global(qos: qos).async {
                        ran.add()
                        done.leave()
                    }
                }
            }
        }
        // The producer finishes while the lock is still held: it did not wait for it.
        let returned = producer.join(until: .now + .seconds(30))
        let ranWhileHeld = ran.count
        pool.unlockPool()
        XCTAssertTrue(returned, "a submission waited for the pool's lock")
        XCTAssertEqual(ranWhileHeld, 0)
        XCTAssertEqual(pool.stage.stagedSoFar - stagedBefore, 30)
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(ran.count, 30)
        XCTAssertTrue(sleeper.join(until: .now + .seconds(30)))
    }

    /// The stage keeps a flag per tier: a drain of the normal tier moves the normal jobs only and
    /// leaves the background tier's flag raised and its jobs staged, for a drain of that tier —
    /// which finds them all, and takes the normal tier's staged jobs with them
    /// (docs/DispatchPool.md, "One flag per tier"). No threads: one stage of its own, drained into
    /// run queues of its own.
    func testADrainOfOneTierLeavesTheOtherTiersJobsStagedAndItsFlagRaised() {
        let stage = InjectionStage(width: 4)
        var queues = RunQueues()
        let normal = InjectionStage.tierBit(level: 3)
        let background = InjectionStage.tierBit(level: RunQueues.background)
        XCTAssertNotEqual(normal, background)
        XCTAssertTrue(stage.stage(DispatchEntry(.block({})), level: RunQueues.background), "the first job of a tier raises its flag")
        XCTAssertFalse(stage.stage(DispatchEntry(.block({})), level: RunQueues.background))
        XCTAssertTrue(stage.stage(DispatchEntry(.block({})), level: 3), "the other tier's flag is its own")
        XCTAssertFalse(stage.stage(DispatchEntry(.block({})), level: 2))
        XCTAssertEqual(stage.pending.load(ordering: .relaxed), normal | background)

        stage.drain(normal, into: &queues)
        XCTAssertEqual(queues.count(3), 1)
        XCTAssertEqual(queues.count(2), 1)
        XCTAssertEqual(queues.count(RunQueues.background), 0, "a normal drain moved background jobs")
        XCTAssertEqual(stage.pending.load(ordering: .relaxed), background)
        XCTAssertEqual(stage.drainedTiers, normal)

        stage.drainedTiers = 0
        stage.drain(normal, into: &queues)
        XCTAssertEqual(stage.drainedTiers, 0, "a drain of a lowered flag moves nothing")
        XCTAssertTrue(stage.stage(DispatchEntry(.block({})), level: RunQueues.background) == false, "still raised")
        // A background drain takes the normal tier's staged jobs too: background work never
        // enters the run queues ahead of normal work staged before it (the admission rule reads
        // the run queues).
        XCTAssertTrue(stage.stage(DispatchEntry(.block({})), level: 4))
        stage.drain(background, into: &queues)
        XCTAssertEqual(queues.count(RunQueues.background), 3)
        XCTAssertEqual(queues.count(4), 1, "a background drain left normal work staged")
        XCTAssertEqual(queues.count(3) + queues.count(2), 2)
        XCTAssertEqual(stage.pending.load(ordering: .relaxed), 0)
        XCTAssertEqual(stage.drainedTiers, normal | background)
        XCTAssertEqual(stage.stagedSoFar, 6)
    }

    /// 8 producers at once into the global queues of all five levels: every job runs exactly once,
    /// and staging really happened (rounds repeat, up to 5, until it did).
    func testEightProducersAtEveryLevelRunEachJobOnceThroughTheStage() {
        let producers = 8
        let perProducer = stress(200_000) / 8
        let levels: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]
        let stagedBefore = DispatchPool.shared.stage.stagedSoFar
        for _ in 0..<5 {
            let counters = levels.map { _ in JudgedCounter() }
            let done = DispatchGroup()
            let threads = TestThread.spawn(producers, "producer") { p in
                for i in 0..<perProducer {
                    let level = (p + i) % levels.count
                    done.enter()
                    TKDispatchQueue.global(qos: levels[level]).async {
                        counters[level].add()
                        done.leave()
                    }
                }
            }
            XCTAssertTrue(joinAll(threads, until: .now + .seconds(120)))
            XCTAssertEqual(done.wait(timeout: .now() + 120), .success)
            for level in levels.indices {
                let expected = (0..<producers).reduce(0) { sum, p in
                    sum + (0..<perProducer).filter { ($0 + p) % levels.count == level }.count
                }
                XCTAssertEqual(counters[level].count, expected, "level \(levels[level])")
            }
            if DispatchPool.shared.stage.stagedSoFar > stagedBefore { return }
        }
        XCTFail("no submission was staged in 5 rounds of 8 producers")
    }
}
