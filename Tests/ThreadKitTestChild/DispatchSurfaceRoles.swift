// DispatchSurfaceRoles: child processes for the dispatch surface added after SPEC §6's first cut
// (issue 14's "Dispatch surface", issue 15 items 5 and 7): misuse of descriptor sources and of
// queue retargeting, each stopped by ThreadKit with a message naming the object, the call and the
// fix. Exit status 0 means the misuse went unnoticed, which the tests treat as a failure.
import ChildProcessRoles
import Glibc
import ThreadKit

enum DispatchSurfaceRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-read-source-bad-fd", usage: "(a read source on fd -1)") { _ in
            let source = TKDispatchSource.makeReadSource(fileDescriptor: -1, queue: .global())
            source.activate()
            return 0
        },
        ChildRole(name: "dispatch-write-source-closed-fd", usage: "(a write source on a descriptor that is not open)") { _ in
            let fd = open("/dev/null", O_WRONLY)
            close(fd)
            let source = TKDispatchSource.makeWriteSource(fileDescriptor: fd, queue: .global())
            source.activate()
            return 0
        },
        ChildRole(
            name: "dispatch-read-source-closed-before-activate",
            usage: "(a read source whose descriptor is closed before activate())"
        ) { _ in
            var fds: [Int32] = [0, 0]
            _ = pipe(&fds)
            // A high number, so the descriptors ThreadKit opens meanwhile do not take it again.
            let fd = dup2(fds[0], 200)
            let source = TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
            close(fd)
            source.activate()
            return 0
        },
    ]
}

enum DispatchTargetRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-retarget-active", usage: "(setTarget(queue:) on an active queue)") { _ in
            let queue = TKDispatchQueue(label: "thumbnails")
            queue.setTarget(queue: TKDispatchQueue(label: "io"))
            return 0
        },
        ChildRole(name: "dispatch-retarget-global", usage: "(setTarget(queue:) on a global queue)") { _ in
            TKDispatchQueue.global().setTarget(queue: TKDispatchQueue(label: "io"))
            return 0
        },
        ChildRole(name: "dispatch-retarget-cycle", usage: "(setTarget(queue:) making a target loop)") { _ in
            let a = TKDispatchQueue(label: "a", attributes: .initiallyInactive)
            let b = TKDispatchQueue(label: "b", target: a)
            a.setTarget(queue: b)
            return 0
        },
    ]
}

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

enum DispatchDataRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "dispatch-data-subrange-outside", usage: "(a subrange past the end of a TKDispatchData)") { _ in
            let data = TKDispatchData(copying: [UInt8](repeating: 1, count: 10))
            _ = data.subdata(in: 5..<20)
            return 0
        }
    ]
}
