// JoinableThreads: joinable (non-detached) TKThreads that have started and not finished, and the
// atexit handler that waits for them, so that work such as saving data is not cut off when the
// main thread returns. Any thread; the set is guarded by its Protected lock.
import Glibc

// safety: its fields are a `Protected` table and a once-state, each thread-safe.
final class JoinableThreads: @unchecked Sendable {
    static let shared = JoinableThreads()

    private let live = Protected<[ObjectIdentifier: TKThread]>([:])
    private let installed = OnceState()

    func add(_ thread: TKThread) {
        installed.run { atexit { JoinableThreads.shared.joinAll() } }
        live.withLock { $0[ObjectIdentifier(thread)] = thread }
    }

    func remove(_ thread: TKThread) {
        live.withLock { $0[ObjectIdentifier(thread)] = nil }
    }

    /// Runs at normal process exit: joins every live joinable thread except the exiting one, until
    /// none is left (a joined thread may have started more).
    private func joinAll() {
        let me = TKThread.currentIfKnown
        while let next = live.withLock({ threads in threads.values.first { $0 !== me } }) {
            next.join()
            remove(next)
        }
    }
}
