// DispatchSourceKindRoles: a process source watching this process's own signals, in a process
// of its own (a signal source there catches SIGUSR2 before the role raises it). Exit status 0 when
// the process source saw the signal.
import ChildProcessRoles
import Glibc
import ThreadKit

enum DispatchSourceKindRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "dispatch-process-source-signal",
            usage: "(a process source on this process sees a SIGUSR2 that a signal source catches; exit 0)"
        ) { _ in
            let catcher = TKDispatchSource.makeSignalSource(signal: SIGUSR2, queue: .global())
            catcher.setEventHandler {}
            catcher.activate()
            let process: TKDispatchSource
            do {
                process = try TKDispatchSource.makeProcessSource(identifier: getpid(), eventMask: .signal, queue: .global())
            } catch {
                Console.out("refused: \(error)")
                return 1
            }
            let got = TKDispatchSemaphore(value: 0)
            let seen = TKAtomicInt32(0)
            process.setEventHandler {
                if TKDispatchSource.ProcessEvent(rawValue: process.data).contains(.signal) { seen.store(1) }
                got.signal()
            }
            process.activate()
            raise(SIGUSR2)
            let ok = got.wait(until: .now + .seconds(20)) == .success && seen.load() == 1
            Console.out(ok ? "process source saw the signal" : "no signal event")
            return ok ? 0 : 1
        }
    ]
}
