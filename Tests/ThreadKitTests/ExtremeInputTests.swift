// Extreme input (issue 15, item 7): every case of `ThreadKitTestChild extreme` runs in a process of
// its own and must end with ThreadKit's answer — a result, a thrown TKError, or a "ThreadKit
// misuse:" message — never with a trap of Swift's arithmetic (which prints no ThreadKit message).
// The cases (Tests/ThreadKitTestChild/ExtremeCases.swift): stack sizes Int.max/Int.min/-1/0, a
// thread that cannot be created, priorities NaN/±infinity, repeating run-loop and dispatch timers
// whose first fire is more than Int.max intervals in the past, timer intervals of 0, negative and
// 2^64 seconds, asyncAfter and perform(afterDelay:) far in the future and past, waits of every
// kind with deadlines past Int64 seconds either way, concurrentPerform over 0/-1/Int.min
// iterations, a semaphore of Int.max units, operation-queue limits Int.max/0, TKDispatchIO water
// marks and lengths at Int.max and below zero, a message-port limit and a bound-stream buffer of
// Int.max, atomics wrapping around.
import Foundation
import Testing
import ThreadKit
import XCTest

final class ExtremeInputTests: XCTestCase {
    func testEveryExtremeCaseEndsWithThreadKitsAnswer() throws {
        let list = try ChildProcess.run("extreme", ["list"])
        let cases = list.standardOutput.split(separator: "\n").map(String.init)
        XCTAssertGreaterThan(cases.count, 20, list.standardError)
        for name in cases {
            let result = try ChildProcess.run("extreme", [name])
            XCTAssertEqual(result.status, 0, "\(name): \(result.standardError)")
            XCTAssertFalse(result.signalled, "\(name) crashed: \(result.standardError)")
            XCTAssertTrue(result.standardOutput.contains("ok \(name):"), "\(name): \(result.standardOutput) \(result.standardError)")
        }
    }
}

/// The extreme input that must stop the process with a misuse message, an exit test
/// (Support/MisuseAssertions.swift).
@Suite struct ExtremeInputExitTests {
    @Test func aSemaphoreSignalledPastIntMaxStopsWithAMessage() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            TKDispatchSemaphore(value: Int.max).signal() // one more than Int.max units
        }
        expectMisuse(result, mentions: ["already had Int.max units"])
    }
}
