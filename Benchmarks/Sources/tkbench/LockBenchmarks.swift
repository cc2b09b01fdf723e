// LockBenchmarks: lock+unlock without contention (one thread, in a process that has others), with 2 threads contending (total
// throughput as time per operation), the read path of the read-write lock, and the recursive,
// spin and synchronized variants.
import Foundation
import Synchronization
import ThreadKit

enum LockBenchmarks {
    static func rows() -> [Row] {
        [uncontended(), contended(), recursive(), readPath(), readPathTwoThreads(), spinAndSynchronized()]
    }

    /// A thread that exists and sleeps: glibc (and NSLock on it) takes plain loads and stores
    /// instead of locked instructions while a process has never had a second thread
    /// (`__libc_single_threaded`), a state no program that uses a threading library is in. Started
    /// before the uncontended row so every contender runs the path a threaded program runs.
    static let bystander: Void = {
        let thread = Thread { while true { Thread.sleep(forTimeInterval: 3600) } }
        thread.start()
    }()

    static func uncontended() -> Row {
        _ = bystander
        let tk = TKLock()
        let ns = NSLock()
        let pm = PThreadMutex()
        let mutex = Mutex<Int>(0)
        return Row(
            group: "locks", name: "uncontended lock+unlock", operations: 2_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKLock") { n in
                    timed {
                        for _ in 0..<n {
                            tk.lock()
                            tk.unlock()
                        }
                    }
                },
                Contender(name: "NSLock") { n in
                    timed {
                        for _ in 0..<n {
                            ns.lock()
                            ns.unlock()
                        }
                    }
                },
                Contender(name: "pthread_mutex") { n in
                    timed {
                        for _ in 0..<n {
                            pthread_mutex_lock(&pm.mutex)
                            pthread_mutex_unlock(&pm.mutex)
                        }
                    }
                },
                Contender(name: "Synchronization.Mutex") { n in timed { for _ in 0..<n { mutex.withLock { $0 &+= 1 } } } },
            ], reference: "NSLock", target: "≤ 0.6× NSLock and ≤ 1.0× Mutex")
    }

    static func contended() -> Row {
        func contender(_ name: String, _ lock: @escaping @Sendable (Counter) -> Void) -> Contender {
            Contender(name: name) { n in
                let counter = Counter()
                let elapsed = parallel(2) { _ in for _ in 0..<(n / 2) { lock(counter) } }
                precondition(counter.value == n / 2 * 2, "\(name) lost increments")
                return elapsed
            }
        }
        let tk = TKLock()
        let ns = NSLock()
        let pm = PThreadMutex()
        let mutex = Mutex<Int>(0)
        return Row(
            group: "locks", name: "2 threads contending (per op)", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                contender("TKLock") { c in
                    tk.lock()
                    c.value += 1
                    tk.unlock()
                },
                contender("NSLock") { c in
                    ns.lock()
                    c.value += 1
                    ns.unlock()
                },
                contender("pthread_mutex") { c in
                    pthread_mutex_lock(&pm.mutex)
                    c.value += 1
                    pthread_mutex_unlock(&pm.mutex)
                },
                contender("Synchronization.Mutex") { c in mutex.withLock { _ in c.value += 1 } },
            ], reference: "NSLock", target: "≤ 1.0× NSLock and Mutex")
    }

    static func recursive() -> Row {
        let tk = TKRecursiveLock()
        let ns = NSRecursiveLock()
        return Row(
            group: "locks", name: "recursive lock, depth 2", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKRecursiveLock") { n in
                    timed {
                        for _ in 0..<n {
                            tk.lock()
                            tk.lock()
                            tk.unlock()
                            tk.unlock()
                        }
                    }
                },
                Contender(name: "NSRecursiveLock") { n in
                    timed {
                        for _ in 0..<n {
                            ns.lock()
                            ns.lock()
                            ns.unlock()
                            ns.unlock()
                        }
                    }
                },
            ], reference: "NSRecursiveLock", target: "—")
    }

    static func readPath() -> Row {
        let tk = TKReadWriteLock()
        let rw = PThreadRWLock()
        return Row(
            group: "locks", name: "read lock+unlock, 1 thread", operations: 2_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKReadWriteLock") { n in
                    timed {
                        for _ in 0..<n {
                            tk.readLock()
                            tk.unlock()
                        }
                    }
                },
                Contender(name: "pthread_rwlock") { n in
                    timed {
                        for _ in 0..<n {
                            pthread_rwlock_rdlock(&rw.lock)
                            pthread_rwlock_unlock(&rw.lock)
                        }
                    }
                },
            ], reference: "pthread_rwlock", target: "—")
    }

    static func readPathTwoThreads() -> Row {
        let tk = TKReadWriteLock()
        let rw = PThreadRWLock()
        return Row(
            group: "locks", name: "read lock+unlock, 2 readers (per op)", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKReadWriteLock") { n in
                    parallel(2) { _ in
                        for _ in 0..<(n / 2) {
                            tk.readLock()
                            tk.unlock()
                        }
                    }
                },
                Contender(name: "pthread_rwlock") { n in
                    parallel(2) { _ in
                        for _ in 0..<(n / 2) {
                            pthread_rwlock_rdlock(&rw.lock)
                            pthread_rwlock_unlock(&rw.lock)
                        }
                    }
                },
            ], reference: "pthread_rwlock", target: "—")
    }

    static func spinAndSynchronized() -> Row {
        let spin = TKSpinLock()
        let ns = NSLock()
        let token = NSObject()
        return Row(
            group: "locks", name: "spin lock and synchronized(token)", operations: 1_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKSpinLock") { n in
                    timed {
                        for _ in 0..<n {
                            spin.lock()
                            spin.unlock()
                        }
                    }
                },
                Contender(name: "synchronized(token)") { n in timed { for _ in 0..<n { synchronized(token) { blackHole(0) } } } },
                Contender(name: "NSLock") { n in
                    timed {
                        for _ in 0..<n {
                            ns.lock()
                            ns.unlock()
                        }
                    }
                },
            ], reference: "NSLock", target: "—")
    }
}
