// DispatchEntry+Diagnostics: how a queue runs an entry when diagnostics are on (docs/Diagnostics.md):
// the queue held as a lock while an exclusive item runs (§1), the hang watchdog's mark (§2), and
// the metrics' count of started items (docs/Metrics.md), and the queue's running thread for thread
// dumps (§6).
// Runs on the thread that runs the entry.

extension DispatchEntry {
    /// Runs the entry as an item of `queue` (`exclusive`: nothing else of it runs meanwhile).
    /// With diagnostics off this is one relaxed load and a branch in front of `run()`.
    @inline(__always)
    func runObserved(on queue: TKDispatchQueue, exclusive: Bool) {
        if DiagnosticsSwitch.isOn(TKDiagnosticsFeature.hangs.union(.lockOrder).union(.metrics).union(.waits)) {
            runDiagnosed(on: queue, exclusive: exclusive)
        } else {
            run()
        }
    }

    @inline(never)
    private func runDiagnosed(on queue: TKDispatchQueue, exclusive: Bool) {
        if DiagnosticsSwitch.isOn(.metrics) { Metrics.entryStarting(self, on: queue) } // depth (docs/Metrics.md)
        // The draining thread does not wait for the queue, so it adds no edge to it (as a
        // try-lock), but locks taken inside the item order after the queue.
        let ordered = exclusive && isUserWork && DiagnosticsSwitch.isOn(.lockOrder)
        if ordered { LockOrder.acquire(queue.orderLabel, kind: "TKDispatchQueue", isTry: true) }
        let hang = isUserWork && DiagnosticsSwitch.isOn(.hangs) ? HangWatchdog.begin(.queueItem(label: queue.label)) : nil
        // Who waits for whom (§6): a `sync` waiting for the queue names this thread.
        let running = isUserWork && WaitGraph.beginRunning(queue, exclusive: exclusive)
        run()
        if running { WaitGraph.endRunning(queue) }
        if let hang { HangWatchdog.end(hang) }
        if ordered { LockOrder.release(queue.orderLabel) }
    }
}
