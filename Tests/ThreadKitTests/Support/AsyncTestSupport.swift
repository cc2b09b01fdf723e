// AsyncTestSupport: helpers for the Async* suites (awaiting ThreadKit objects). Like TestSupport,
// independent of ThreadKit: every wait polls with a deadline, so a hang fails the test instead of
// stalling the run.
import Foundation
import XCTest

/// Polls `condition` from a task until it holds (true) or `deadline` passes (false). Yields
/// first, then backs off to short task sleeps, so a long wait does not hold a pool thread.
func eventually(_ deadline: ContinuousClock.Instant = .now + .seconds(30), _ condition: () -> Bool) async -> Bool {
    var polls = 0
    while !condition() {
        if ContinuousClock.now >= deadline { return condition() }
        polls += 1
        if polls < 50 {
            await Task.yield()
        } else {
            try? await Task.sleep(for: .microseconds(polls < 500 ? 100 : 1_000))
        }
    }
    return true
}

/// `task`'s result, or nil if it has not finished within `limit` (a hang, reported by the caller).
func outcome<T: Sendable>(of task: Task<T, any Error>, within limit: Duration = .seconds(30)) async -> Result<T, any Error>? {
    let done = Flag()
    Task {
        _ = await task.result
        done.set()
    }
    guard await eventually(.now + limit, { done.isSet }) else { return nil }
    return await task.result
}

/// As above, for a task that cannot throw.
func outcome<T: Sendable>(of task: Task<T, Never>, within limit: Duration = .seconds(30)) async -> T? {
    let done = Flag()
    Task {
        _ = await task.value
        done.set()
    }
    guard await eventually(.now + limit, { done.isSet }) else { return nil }
    return await task.value
}

/// Asserts that `result` is a success.
func assertSucceeded<T>(_ result: Result<T, any Error>?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    switch result {
    case nil: XCTFail("\(what): did not finish in time", file: file, line: line)
    case .failure(let error)?: XCTFail("\(what): threw \(error)", file: file, line: line)
    case .success?: break
    }
}

/// Asserts that `result` is a CancellationError.
func assertCancelled<T>(_ result: Result<T, any Error>?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    switch result {
    case nil: XCTFail("\(what): did not finish in time", file: file, line: line)
    case .success?: XCTFail("\(what): returned instead of throwing CancellationError", file: file, line: line)
    case .failure(let error)?:
        XCTAssertTrue(error is CancellationError, "\(what): threw \(error), not CancellationError", file: file, line: line)
    }
}

/// Cancels the calling task (to test waits that begin in an already-cancelled task).
func cancelCurrentTask() {
    withUnsafeCurrentTask { $0?.cancel() }
}
