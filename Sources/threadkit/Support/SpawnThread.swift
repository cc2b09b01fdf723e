// SpawnThread: a minimal joinable POSIX thread for the tour and child roles, until TKThread
// (SPEC §1) lands. Each handle is joined once, by the thread that spawned it.
import Glibc

final class SpawnedThread {
    private var handle = pthread_t()

    private final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    init(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let r = pthread_create(
            &handle, nil,
            { raw in
                let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
                box.body()
                return nil
            }, box)
        if r != 0 { fatalError("threadkit: pthread_create failed with \(r)") }
    }

    func join() {
        pthread_join(handle, nil)
    }
}

/// Gives up the CPU once (sched_yield), for polling loops in the tour.
func yieldCPU() { sched_yield() }
