// Parallel: runs a body on several threads released together, timing only the parallel part
// (thread creation is excluded). Driver thread only.
import Foundation
import Synchronization

final class StartGate: Sendable {
    let ready = Atomic<Int>(0)
    let go = Atomic<Bool>(false)
    /// The driver sleeps on this rather than polling, so it never competes with the measured
    /// threads for one of the two cores.
    let done = DispatchSemaphore(value: 0)
}

/// Starts `threads` threads running `body(index)`; returns the nanoseconds from release to the last
/// thread finishing.
func parallel(_ threads: Int, _ body: @escaping @Sendable (Int) -> Void) -> Double {
    let gate = StartGate()
    for index in 0..<threads {
        Thread {
            gate.ready.wrappingAdd(1, ordering: .acquiringAndReleasing)
            while !gate.go.load(ordering: .acquiring) { sched_yield() }
            body(index)
            gate.done.signal()
        }.start()
    }
    while gate.ready.load(ordering: .acquiring) < threads { sched_yield() }
    let start = now()
    gate.go.store(true, ordering: .releasing)
    for _ in 0..<threads { gate.done.wait() }
    return Double(now() - start)
}

/// A counter shared by the contended-lock threads, guarded by whichever lock is measured.
final class Counter: @unchecked Sendable { var value = 0 }

/// A pthread mutex / rwlock in a class, so closures can share it.
final class PThreadMutex: @unchecked Sendable {
    var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
}

final class PThreadRWLock: @unchecked Sendable {
    var lock = pthread_rwlock_t()
    init() { pthread_rwlock_init(&lock, nil) }
    deinit { pthread_rwlock_destroy(&lock) }
}
