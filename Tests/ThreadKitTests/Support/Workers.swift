// Workers: DispatchGroup-based thread helpers (beside TestSupport's spin-barrier TestThread).
// Threads are Foundation Threads (the judge is independent of ThreadKit); completion is judged with
// Foundation's DispatchGroup, and every wait has a generous deadline so a hang fails the test
// instead of stalling the run.
import Foundation
import XCTest

enum Workers {
    /// Runs `body(index)` on `count` new threads, released together by a start gate, and waits
    /// (at most `timeout`) for all of them. Fails the test if they do not finish in time.
    static func run(
        _ count: Int, timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line,
        _ body: @escaping @Sendable (Int) -> Void
    ) {
        let group = DispatchGroup()
        let gate = DispatchSemaphore(value: 0)
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                gate.wait()
                body(index)
                group.leave()
            }
            thread.start()
        }
        for _ in 0..<count { gate.signal() }
        XCTAssertEqual(
            group.wait(timeout: .now() + timeout), .success, "threads did not finish within \(timeout) s",
            file: file, line: line)
    }

    /// Starts `body` on a new thread; the returned group is left when it returns.
    static func start(_ body: @escaping @Sendable () -> Void) -> DispatchGroup {
        let group = DispatchGroup()
        group.enter()
        Thread {
            body()
            group.leave()
        }.start()
        return group
    }
}

/// A counter protected by a pthread mutex: the independent judge of what the threads did.
final class JudgedCounter: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var value = 0
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func add(_ n: Int = 1) {
        pthread_mutex_lock(&mutex)
        value += n
        pthread_mutex_unlock(&mutex)
    }
    var count: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return value
    }
}

/// A value shared by test threads; the test states which lock guards each use.
final class Shared<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// A value under a pthread mutex, for tests' own records: ThreadSanitizer sees pthread locks
/// (it does not see Synchronization.Mutex's lock path and reports false races through it).
final class Guarded<Value>: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var value: Value // guarded by mutex

    init(_ value: Value) {
        self.value = value
        pthread_mutex_init(&mutex, nil)
    }

    deinit { pthread_mutex_destroy(&mutex) }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body(&value)
    }
}
