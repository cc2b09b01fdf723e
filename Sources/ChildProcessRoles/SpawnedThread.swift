// SpawnedThread: a minimal joinable POSIX thread for the tour and the child roles, independent of
// TKThread (which some roles judge). Each handle is joined once, by the thread that spawned it.
import Glibc

package final class SpawnedThread {
    private var handle = pthread_t()

    private final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    package init(_ body: @escaping @Sendable () -> Void) {
        // safety: the retained box is released exactly once, by the new thread (takeRetainedValue).
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let r = pthread_create(
            &handle, nil,
            { raw in
                let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
                box.body()
                return nil
            }, box)
        if r != 0 { fatalError("pthread_create failed with \(r)") }
    }

    package func join() {
        pthread_join(handle, nil)
    }
}

/// Gives up the CPU once (sched_yield), for polling loops in the tour.
package func yieldCPU() { sched_yield() }
