// LockOwnershipTests: in a debug build, a `…Locked` function (or the pool's scheduler) reached
// without its lock stops the process with a message that names the function, the lock, who holds
// it and the fix (LockOwnershipRoles in ThreadKitTestChild). Release builds do not check, so
// these tests exist only in debug builds.
#if DEBUG
    import XCTest

    final class LockOwnershipTests: XCTestCase {
        private func assertStops(_ variant: String, mentions fragments: [String], file: StaticString = #filePath, line: UInt = #line) throws
        {
            let result = try ChildProcess.run("locked-without-lock", [variant])
            XCTAssertTrue(
                result.signalled || result.status != 0,
                "\(variant): the call ran on without its lock (status \(result.status))", file: file, line: line)
            for fragment in ["ThreadKit lock not held:", "Fix: take"] + fragments {
                XCTAssertTrue(
                    result.standardError.contains(fragment), "stderr lacks \"\(fragment)\": \(result.standardError)",
                    file: file, line: line)
            }
        }

        /// Each variant: a DispatchLock nobody holds, one another thread holds, a RawMutex nobody
        /// holds, and the pool's scheduler addressor.
        func testALockedCallWithoutItsLockStopsTheProcess() throws {
            let variants: [(name: String, mentions: [String])] = [
                ("queue", ["planStartLocked()", "TKDispatchQueue.lock", "nobody holds it"]),
                ("held-elsewhere", ["planStartLocked()", "TKDispatchQueue.lock", "it is held by thread"]),
                ("run-loop", ["isCommonLocked(_:)", "TKRunLoop.lock", "nobody holds it"]),
                ("scheduler", ["scheduler needs DispatchPool.lock", "nobody holds it"]),
            ]
            for variant in variants { try assertStops(variant.name, mentions: variant.mentions) }
        }
    }
#endif
