// PeriodicReporter: the thread that calls an exporter's report every interval until it is stopped,
// for TKMetricsExporter and TKPostgresQueueMetrics. `start`, `stop` and `isRunning` from any thread
// (the current run is kept under `current`'s lock); the thread itself reads only its own run's stop
// flag and waits on its own semaphore, so a stop followed by a start never wakes the old thread's
// successor.
import Synchronization
import ThreadKit

final class PeriodicReporter: Sendable {
    /// One started thread's stop flag and the semaphore that cuts its wait short.
    private final class Run: Sendable {
        let stopping = Atomic<Bool>(false)
        let wake = TKDispatchSemaphore(value: 0)
    }

    /// The thread's name.
    let name: String
    private let current = Mutex<Run?>(nil)

    init(name: String) { self.name = name }

    var isRunning: Bool { current.withLock { $0 != nil } }

    /// Starts the thread, which calls `body` at once and then every `interval` until ``stop()``.
    /// Returns false, and starts nothing, when a thread runs already. The thread keeps what `body`
    /// captures alive until it ends.
    @discardableResult
    func start(interval: Duration, _ body: @escaping @Sendable () -> Void) -> Bool {
        current.withLock { run in
            guard run == nil else { return false }
            let new = Run()
            run = new
            TKThread(name: name) {
                while !new.stopping.load(ordering: .acquiring) {
                    body()
                    _ = new.wake.wait(until: .now + interval)
                }
            }.start()
            return true
        }
    }

    /// Ends the thread after the call of `body` it is making, if any; false when none runs.
    @discardableResult
    func stop() -> Bool {
        current.withLock { run in
            guard let stopping = run else { return false }
            stopping.stopping.store(true, ordering: .releasing)
            _ = stopping.wake.signal()
            run = nil
            return true
        }
    }
}
