// SharedChildRoles: the child-process roles both the tour (`threadkit tour --child ROLE`) and the
// tests (`ThreadKitTestChild ROLE`) start, kept once here: joinable-save (ThreadTests and the
// detached-pitfall scenario), dlock-hold (DistributedLockTests, the distributed-lock scenario),
// port-echo (SocketPortTests, socket-ports), global-executor and global-executor-too-late
// (ExecutorTests, global-executor). Each role runs on its process's main thread, which owns the main run loop, and
// prints what it did on standard output.
import Glibc
import Synchronization
import ThreadKit

package enum SharedChildRoles {
    package static let all: [ChildRole] = [
        ChildRole(name: "joinable-save", usage: "PATH (main returns while a joinable thread is still writing PATH)") { args in
            guard let path = args.first else { return 2 }
            let saver = TKThread(name: "saver") { writeSlowly(path, chunks: 20) }
            saver.isDetached = false
            saver.start()
            Console.out("    (child: main returns while the joinable saver writes)")
            return 0 // exit() runs the atexit handler, which joins the saver
        },
        ChildRole(name: "dlock-hold", usage: "PATH (take the lock, print \"child PID: locked\", then hold it until killed)") { args in
            guard let path = args.first, let lock = try? TKDistributedLock(path: path) else { return 2 }
            while !lock.tryLock() { TKThread.sleep(for: .milliseconds(5)) }
            Console.out("    child \(getpid()): locked")
            while true { TKThread.sleep(for: .seconds(3600)) }
        },
        ChildRole(
            name: "port-echo",
            usage: "ADDRESS [FILE] (listen; print \"listening ADDRESS\" (or write it to FILE); answer each "
                + "message through its reply port with msgid+1 and the same components; exit on msgid 0xFFFFFFFF)"
        ) { args in
            guard let port = PortAddress.listening(args.first ?? "tcp:0") else { return 2 }
            let echo = Echo()
            port.delegate = echo
            let loop = TKRunLoop.current
            loop.add(port, forMode: .default)
            if args.count > 1 {
                writeFile(args[1], PortAddress.describe(port) + "\n")
            } else {
                Console.out("listening \(PortAddress.describe(port))")
            }
            while !echo.finished.load(ordering: .acquiring) {
                _ = loop.run(mode: .default, before: .now + .seconds(3600))
            }
            port.invalidate()
            return 0
        },
        ChildRole(
            name: "global-executor", usage: "N (install the pool as the global executor, run N tasks, count them)", run: globalExecutor),
        ChildRole(name: "global-executor-too-late", usage: "(a Task runs first, then the install is refused)") { _ in
            let done = TKDispatchSemaphore(value: 0)
            Task.detached { done.signal() }
            done.wait()
            do {
                try TKConcurrency.installGlobalExecutor()
                Console.out("installed")
                return 1
            } catch {
                Console.out("refused: \(error)")
                return 0
            }
        },
    ]

    /// global-executor: N tasks on the pool installed as Swift's global executor, then tasks
    /// blocked in a ThreadKit wait (compensation) and a Task.sleep; exit 0 when every task ran on
    /// a pool worker.
    @Sendable private static func globalExecutor(_ args: [String]) -> Int32 {
        let n = args.first.flatMap(Int.init) ?? 1_000_000
        do { try TKConcurrency.installGlobalExecutor() } catch {
            Console.out("refused: \(error)")
            return 1
        }
        // Judged by the standard library's atomics (independent of ThreadKit, and cheap enough not
        // to become the contended thing being measured).
        let ran = AtomicCounter()
        let onPool = AtomicCounter()
        let done = TKDispatchSemaphore(value: 0)
        Task {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<n {
                    group.addTask {
                        ran.add()
                        if TKThread.current.name?.hasPrefix("tk.dispatch") == true { onPool.add() }
                    }
                }
            }
            // Blocked-worker compensation covers tasks: 8 tasks (more than the cores) each block in
            // a ThreadKit wait until the last one arrives; without another worker started for each
            // blocked one, they would never all arrive.
            let arrived = TKAtomicInt32(0)
            let gate = TKDispatchSemaphore(value: 0)
            let parties: Int32 = 8
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<parties {
                    group.addTask {
                        if arrived.increment() == parties {
                            for _ in 1..<parties { gate.signal() }
                        } else {
                            gate.wait()
                        }
                    }
                }
            }
            Console.out("\(parties) tasks blocked in a TKDispatchSemaphore wait all finished")
            // Task.sleep waits on the pool's timers and resumes on the pool.
            let before = ContinuousClock.now
            try? await Task.sleep(for: .milliseconds(20))
            let slept = ContinuousClock.now - before
            Console.out(
                "slept \(slept >= .milliseconds(20) ? "at least" : "LESS THAN") 20 ms; resumed on the pool: \(TKThread.current.name?.hasPrefix("tk.dispatch") == true)"
            )
            done.signal()
        }
        done.wait()
        Console.out("tasks run: \(ran.count) of \(n); on pool workers: \(onPool.count)")
        return ran.count == n && onPool.count == n ? 0 : 1
    }

    /// A counter on the standard library's atomics: the judge of global-executor.
    private final class AtomicCounter: Sendable {
        private let value = Atomic<Int>(0)
        func add() { value.wrappingAdd(1, ordering: .relaxed) }
        /// Read after the work was joined (the join orders it after every add).
        var count: Int { value.load(ordering: .relaxed) }
    }

    /// Answers every message through its reply port; msgid 0xFFFFFFFF ends the role. Called on the
    /// child's main thread (its port is scheduled on the main loop).
    private final class Echo: TKPortDelegate {
        let finished = Atomic<Bool>(false)
        func handlePortMessage(_ message: TKPortMessage) {
            if message.msgid == UInt32.max {
                finished.store(true, ordering: .releasing)
                return
            }
            guard let reply = message.sendPort else { return }
            let answer = TKPortMessage(sendPort: reply, receivePort: nil, components: message.components)
            answer.msgid = message.msgid &+ 1
            if !answer.send(before: .now + .seconds(30)) { Console.err("reply failed: \(answer.failureReason ?? "?")") }
        }
    }

    /// Writes `chunks` lines to `path`, pausing 10 ms between them, like a slow save to disk.
    package static func writeSlowly(_ path: String, chunks: Int) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return }
        for i in 1...chunks {
            var line = "chunk \(i) of \(chunks)\n"
            line.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
            TKThread.sleep(for: .milliseconds(10))
        }
        close(fd)
    }

    /// Writes `text` to a new file at `path`, whole: a reader polling for the file sees all or nothing.
    package static func writeFile(_ path: String, _ text: String) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return }
        var text = text
        text.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
        close(fd)
        rename(temporary, path)
    }
}

/// Socket-port addresses as the port scenarios and port-echo write them: `tcp:PORT`,
/// `tcp:HOST:PORT` or `unix:PATH`; a listener given `tcp:0` picks a free port.
package enum PortAddress {
    /// The address as a remote (sending) port.
    package static func remote(_ address: String) -> TKSocketPort? {
        let parts = address.split(separator: ":", maxSplits: 2).map(String.init)
        switch (parts.first, parts.count) {
        case ("tcp", 2): return UInt16(parts[1]).flatMap { try? TKSocketPort(remoteHost: "127.0.0.1", port: $0) }
        case ("tcp", 3): return UInt16(parts[2]).flatMap { try? TKSocketPort(remoteHost: parts[1], port: $0) }
        case ("unix", 2): return try? TKSocketPort(unixSocketPath: parts[1], remote: true)
        default: return nil
        }
    }

    /// `tcp:PORT` or `unix:PATH` as a listening port.
    package static func listening(_ address: String) -> TKSocketPort? {
        let parts = address.split(separator: ":", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case "tcp": return UInt16(parts[1]).flatMap { try? TKSocketPort(tcpPort: $0) }
        case "unix": return try? TKSocketPort(unixSocketPath: parts[1])
        default: return nil
        }
    }

    /// The address form above for a listening port.
    package static func describe(_ port: TKSocketPort) -> String {
        switch port.address {
        case .tcp(_, let number): return "tcp:\(number)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}
