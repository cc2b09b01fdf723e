// DispatchEntry+Diagnostics: how a queue runs an entry when diagnostics are on (docs/Diagnostics.md):
// the queue held as a lock while an exclusive item runs (§1) and the hang watchdog's mark (§2).
// Runs on the thread that runs the entry.

extension DispatchEntry {
    /// Runs the entry as an item of `queue` (`exclusive`: nothing else of it runs meanwhile).
    /// With diagnostics off this is one relaxed load and a branch in front of `run()`.
    @inline(__always)
    func runObserved(on queue: TKDispatchQueue, exclusive: Bool) {
        if DiagnosticsSwitch.isOn(TKDiagnosticsFeature.hangs.union(.lockOrder)) {
            runDiagnosed(on: queue, exclusive: exclusive)
        } else {
            run()
        }
    }

    @inline(never)
    private func runDiagnosed(on queue: TKDispatchQueue, exclusive: Bool) {
        // The draining thread does not wait for the queue, so it adds no edge to it (as a
        // try-lock), but locks taken inside the item order after the queue.
        let ordered = exclusive && isUserWork && DiagnosticsSwitch.isOn(.lockOrder)
        if ordered { LockOrder.acquire(queue.orderLabel, kind: "TKDispatchQueue", isTry: true) }
        let hang = isUserWork && DiagnosticsSwitch.isOn(.hangs) ? HangWatchdog.begin(.queueItem(label: queue.label)) : nil
        run()
        if let hang { HangWatchdog.end(hang) }
        if ordered { LockOrder.release(queue.orderLabel) }
    }
}
