// DispatchManager+Signals: signal sources. Catching a signal is counted per signal (the first
// source installs ThreadKit's handler, the last restores the previous action); the handler counts
// deliveries and writes the poll's wake eventfd, and the manager thread hands the counts to the
// sources (and tells this process's process sources watching `.signal`). Registration from any
// thread under `lock`; `deliverSignals` on the manager thread, telling sources after releasing it.
import CThreadKit

extension DispatchManager {
    /// Catches `signal` for the process while at least one source for it exists (counted).
    /// Returns false if the OS refuses (SIGKILL, SIGSTOP, an invalid number).
    func catchSignal(_ signal: Int32) -> Bool {
        lock.withLock {
            if let n = caughtSignals[signal] {
                caughtSignals[signal] = n + 1
                return true
            }
            guard tk_signal_catch(signal) == 0 else { return false }
            caughtSignals[signal] = 1
            return true
        }
    }

    /// One source of `signal` is gone; the last one restores the previous action.
    func releaseSignal(_ signal: Int32) {
        lock.withLock {
            if DispatchManager.dropHolder(signal, from: &caughtSignals) { _ = tk_signal_restore(signal) }
        }
    }

    /// Delivers deliveries of `signal` from now on to `source`.
    func watchSignal(_ signal: Int32, source: TKDispatchSource) {
        register {
            if signalSources[signal] == nil { _ = tk_signal_take(signal) } // earlier deliveries are not its
            signalSources[signal, default: []].append(source)
        }
    }

    func unwatchSignal(_ signal: Int32, source: TKDispatchSource) {
        lock.withLock {
            signalSources[signal]?.removeAll { $0 === source }
            if signalSources[signal]?.isEmpty == true { signalSources[signal] = nil }
        }
    }

    /// The wake eventfd fired (the signal handler writes it): hands each caught signal's
    /// deliveries since the last call to its sources. Manager thread; sources are told with no
    /// lock held.
    func deliverSignals() {
        let deliveries = lock.withLock { () -> [(TKDispatchSource, UInt)] in
            var list: [(TKDispatchSource, UInt)] = []
            for (signal, sources) in signalSources {
                let n = tk_signal_take(signal)
                if n > 0 { for s in sources { list.append((s, UInt(n))) } }
            }
            return list
        }
        for (source, count) in deliveries { source.merge(count) }
        if !deliveries.isEmpty {
            for source in lock.withLock({ ownSignalSources }) { source.merge(TKDispatchSource.ProcessEvent.signal.rawValue) }
        }
    }

    // Process sources of this very process (.signal): told whenever a caught signal was delivered.

    func watchOwnSignals(_ source: TKDispatchSource) {
        register { ownSignalSources.append(source) }
    }

    func unwatchOwnSignals(_ source: TKDispatchSource) {
        lock.withLock { ownSignalSources.removeAll { $0 === source } }
    }
}
