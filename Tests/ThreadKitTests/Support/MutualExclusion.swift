// MutualExclusion: the one exclusion check every TKLocking lock goes through — 2, 4 and 10
// threads, 10^6 operations in all (scaled by TK_STRESS), a plain counter that loses increments if
// two threads are ever inside together, and an atomic witness of overlap.
import Synchronization
import ThreadKit
import XCTest

func assertMutualExclusion(_ make: () -> any TKLocking, file: StaticString = #filePath, line: UInt = #line) {
    for threads in [2, 4, 10] {
        let lock = make()
        let counter = Shared(0) // guarded by lock
        let inside = Atomic<Int>(0) // independent witness of overlap
        let overlaps = JudgedCounter()
        let perThread = stress(1_000_000) / threads
        let workers = TestThread.spawn(threads, "exclusion") { _ in
            for _ in 0..<perThread {
                lock.lock()
                if inside.wrappingAdd(1, ordering: .relaxed).newValue != 1 { overlaps.add() }
                counter.value += 1
                inside.wrappingSubtract(1, ordering: .relaxed)
                lock.unlock()
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)), "\(threads) threads did not finish", file: file, line: line)
        XCTAssertEqual(counter.value, perThread * threads, "\(type(of: lock)), \(threads) threads lost increments", file: file, line: line)
        XCTAssertEqual(overlaps.count, 0, "\(type(of: lock)), \(threads) threads overlapped inside the lock", file: file, line: line)
    }
}
