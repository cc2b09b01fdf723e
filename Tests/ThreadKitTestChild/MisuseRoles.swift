// MisuseRoles: child processes that commit one misuse each and must be stopped by ThreadKit with
// a message naming the object and the fix. Exit status 0 from one of these means the misuse went
// unnoticed, which the tests treat as a failure.
import ChildProcessRoles
import ThreadKit

enum MisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "lock-unlock-foreign", usage: "(unlock a TKLock held by another thread)") { _ in
            let lock = TKLock()
            lock.name = "store"
            lock.lock()
            let other = SpawnedThread { lock.unlock() }
            other.join()
            return 0
        },
        ChildRole(name: "lock-unlock-unlocked", usage: "(unlock a TKLock nobody holds)") { _ in
            let lock = TKLock()
            lock.name = "store"
            lock.unlock()
            return 0
        },
        ChildRole(name: "lock-twice", usage: "(lock a TKLock twice on one thread)") { _ in
            let lock = TKLock()
            lock.name = "store"
            lock.lock()
            lock.lock()
            return 0
        },
        ChildRole(name: "recursive-unlock-foreign", usage: "(unlock a TKRecursiveLock not held)") { _ in
            let lock = TKRecursiveLock()
            lock.name = "tree"
            lock.unlock()
            return 0
        },
        ChildRole(name: "condition-wait-unlocked", usage: "(wait on a TKCondition without its lock)") { _ in
            let condition = TKCondition()
            condition.name = "queue"
            condition.wait()
            return 0
        },
        ChildRole(name: "conditionlock-unlock-foreign", usage: "(unlock a TKConditionLock not held)") { _ in
            let lock = TKConditionLock(condition: 0)
            lock.name = "mailbox"
            lock.unlock(withCondition: 1)
            return 0
        },
        ChildRole(name: "rwlock-unlock-unlocked", usage: "(unlock a TKReadWriteLock nobody holds)") { _ in
            TKReadWriteLock().unlock()
            return 0
        },
        ChildRole(name: "spinlock-unlock-unlocked", usage: "(unlock a TKSpinLock nobody holds)") { _ in
            TKSpinLock().unlock()
            return 0
        },
        ChildRole(name: "once-reentrant", usage: "(run a TKOnce from inside its own body)") { _ in
            let once = TKOnce()
            once.run { once.run {} }
            return 0
        },
        ChildRole(name: "atomic-bad-bit", usage: "(testAndSet bit 32 of a 32-bit atomic)") { _ in
            TKAtomicInt32(0).testAndSet(bit: 32)
            return 0
        },
        ChildRole(name: "atomic-bad-buffer-bit", usage: "(TKAtomicTestAndSet bit 24 of a 3-byte buffer)") { _ in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 3, alignment: 1)
            TKAtomicTestAndSet(bit: 24, in: buffer)
            return 0
        },
    ]
}

enum RunLoopMisuseRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "runloop-foreign-run", usage: "(run the main thread's loop from another thread)") { _ in
            let main = TKRunLoop.main
            let t = TKThread { main.run(until: .now + .seconds(1)) }
            t.start()
            t.join()
            return 0
        },
        ChildRole(
            name: "runloop-foreign-run-named",
            usage: "current|perform (the main thread runs the loop of a thread named "
                + "\"loop-owner\", made as early as it can be: by the thread's first statement, or by a perform request "
                + "sent right after start(), before the thread ran anything)"
        ) { args in
            let byPerform = args.first == "perform"
            let gate = TKCondition()
            let state = SharedBox<(go: Bool, loop: TKRunLoop?)>((!byPerform, nil)) // guarded by gate
            let owner = TKThread(name: "loop-owner") {
                gate.withLock { while !state.value.go { gate.wait() } }
                let loop = TKRunLoop.current
                gate.withLock {
                    state.value.loop = loop
                    gate.broadcast()
                }
                TKThread.sleep(for: .seconds(3600))
            }
            owner.start()
            if byPerform {
                do { try owner.perform {} } catch {
                    Console.err("perform failed: \(error)")
                    return 3
                }
                gate.withLock {
                    state.value.go = true
                    gate.broadcast()
                }
            }
            let loop = gate.withLock { () -> TKRunLoop in
                while state.value.loop == nil { gate.wait() }
                return state.value.loop!
            }
            loop.run(until: .now + .seconds(1))
            return 0
        },
        ChildRole(name: "runloop-perform-no-modes", usage: "(perform(inModes: []) on a loop)") { _ in
            TKRunLoop.current.perform(inModes: []) {}
            return 0
        },
        ChildRole(name: "runloop-perform-after-delay-no-modes", usage: "(perform(afterDelay:inModes: []) on a loop)") { _ in
            TKRunLoop.current.perform(afterDelay: .milliseconds(1), inModes: []) {}
            return 0
        },
        ChildRole(name: "runloop-main-perform-no-modes", usage: "(performOnMainThread(modes: []))") { _ in
            TKThread.performOnMainThread(modes: []) {}
            return 0
        },
        ChildRole(name: "runloop-timer-second-loop", usage: "(add one TKTimer to the loops of two threads)") { _ in
            let timer = TKTimer(interval: .seconds(60), repeats: false) { _ in }
            TKRunLoop.main.add(timer, forMode: .default)
            let t = TKThread { TKRunLoop.current.add(timer, forMode: .default) }
            t.isDetached = false
            t.start()
            t.join()
            return 0
        },
        ChildRole(name: "runloop-observer-second-loop", usage: "(add one TKRunLoopObserver to the loops of two threads)") { _ in
            let observer = TKRunLoopObserver(activities: .allActivities) { _, _ in }
            TKRunLoop.main.add(observer, forMode: .default)
            let t = TKThread { TKRunLoop.current.add(observer, forMode: .default) }
            t.isDetached = false
            t.start()
            t.join()
            return 0
        },
    ]
}
