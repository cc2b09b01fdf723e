// LockRoles: TKLock and TKRecursiveLock across the start of a process's second thread. While glibc
// says the process has one thread, the mutexes' fast paths are plain loads and stores
// (RawMutex.tryLockFast/tryUnlockFast); the lock taken that way must exclude the second thread
// and hand over to it through the CAS and parking paths. The main thread runs the role and joins
// the one thread it spawns.
import CThreadKit
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum LockRoles {
    /// `lock-single-threaded`: prints `single-threaded at start: BOOL` and `single-threaded after
    /// a second thread: BOOL`, then `ok` and exits 0 when every check held; otherwise prints what
    /// failed and exits 1.
    static let all: [ChildRole] = [
        ChildRole(name: "lock-single-threaded", usage: "(TKLock and TKRecursiveLock as a second thread starts)") { _ in
            print("single-threaded at start: \(tk_single_threaded())")
            let shared = Shared()
            let lock = shared.lock
            let recursive = shared.recursive
            // One thread: lock, tryLock on the held lock, re-entry, all on the fast path.
            lock.lock()
            guard !lock.tryLock() else { return fail("tryLock took a TKLock its own thread holds") }
            lock.unlock()
            guard lock.tryLock() else { return fail("tryLock failed on a free TKLock") }
            recursive.lock()
            recursive.lock()
            guard recursive.tryLock() else { return fail("TKRecursiveLock.tryLock failed on re-entry") }
            recursive.unlock()
            recursive.unlock()
            recursive.unlock()
            guard recursive.tryLock() else { return fail("TKRecursiveLock not free after three unlocks") }
            recursive.unlock()
            // `lock` is still held, taken while the process had one thread. The second thread must
            // see it held, then wait for it, and both threads' increments must all count.
            let rounds = 20_000
            let other = SpawnedThread {
                shared.sawHeld.store(lock.tryLock() ? 2 : 1, ordering: .releasing)
                for _ in 0..<rounds { shared.increment() }
            }
            let deadline = ContinuousClock.now + .seconds(60)
            while shared.sawHeld.load(ordering: .acquiring) == 0 && ContinuousClock.now < deadline { sched_yield() }
            shared.count += 1 // still under the lock taken single-threaded
            lock.unlock()
            for _ in 0..<rounds { shared.increment() }
            other.join()
            print("single-threaded after a second thread: \(tk_single_threaded())")
            guard shared.sawHeld.load(ordering: .acquiring) == 1 else {
                return fail("the second thread's tryLock result: \(shared.sawHeld.load(ordering: .acquiring)) (1: held)")
            }
            guard shared.count == 2 * rounds + 1, shared.nested == 2 * rounds else {
                return fail("count \(shared.count) (want \(2 * rounds + 1)), nested \(shared.nested) (want \(2 * rounds))")
            }
            print("ok")
            return 0
        }
    ]

    private static func fail(_ message: String) -> Int32 {
        print("FAILED: \(message)")
        return 1
    }

    // safety: `count` is read and written only under `lock`, `nested` only under `recursive` (or
    // after the other thread is joined); `sawHeld` is atomic.
    private final class Shared: @unchecked Sendable {
        let lock = TKLock()
        let recursive = TKRecursiveLock()
        let sawHeld = Atomic<Int>(0)
        var count = 0
        var nested = 0

        func increment() {
            lock.lock()
            count += 1
            lock.unlock()
            recursive.lock()
            recursive.lock()
            nested += 1
            recursive.unlock()
            recursive.unlock()
        }
    }
}
