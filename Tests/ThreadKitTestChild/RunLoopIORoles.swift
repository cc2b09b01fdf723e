// RunLoopIORoles: the other processes of the run-loop I/O tests (docs/RunLoopIO.md): a crowd of
// plain POSIX TCP clients (kept out of the test process, whose descriptors the server needs), and
// a listener run out of descriptors. Each role prints what it did on standard output.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum RunLoopIORoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "io-clients",
            usage:
                "PORT COUNT HALF (open COUNT TCP connections to 127.0.0.1:PORT, shut down the sending side of the first HALF, print \"connected COUNT\", then exit when standard input ends)"
        ) { args in
            guard args.count == 3, let port = UInt16(args[0]), let count = Int(args[1]), let half = Int(args[2]) else { return 2 }
            var fds: [Int32] = []
            for i in 0..<count {
                let fd = connectBlocking(port)
                guard fd >= 0 else {
                    Console.err("connect \(i) failed: errno \(-fd)")
                    return 1
                }
                if i < half { shutdown(fd, Int32(SHUT_WR)) }
                fds.append(fd)
            }
            Console.out("connected \(count)")
            var byte: UInt8 = 0
            while read(0, &byte, 1) > 0 {}
            return 0
        },
        ChildRole(
            name: "io-listener-emfile", usage: "(a listener out of descriptors: print \"accepted 3 cpu-ms N\" after descriptors come back)"
        ) { _ in
            listenerOutOfDescriptors()
        },
    ]

    /// A blocking TCP connect to 127.0.0.1:`port`: the descriptor or -errno.
    static func connectBlocking(_ port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -errno }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 {
            let error = errno
            close(fd)
            return -error
        }
        return fd
    }

    /// CPU time this process used, user and system, in milliseconds.
    static func cpuMilliseconds() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000 + Int(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000
    }

    /// Uses up every descriptor (with the limit lowered to 256, so it is quick); close the
    /// returned ones to give them back.
    static func exhaustDescriptors() -> [Int32] {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = 256
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        var fillers: [Int32] = []
        while true {
            let fd = dup(2)
            if fd < 0 { break }
            fillers.append(fd)
        }
        return fillers
    }

    private static func listenerOutOfDescriptors() -> Int32 {
        let accepted = Atomic<Int>(0)
        let listener: TKSocketListener
        do {
            listener = try TKSocketListener(backlog: 16) { fd in
                close(fd)
                accepted.wrappingAdd(1, ordering: .relaxed)
            }
        } catch {
            Console.err("\(error)")
            return 1
        }
        // Three clients wait in the backlog before the listener is scheduled.
        var clients: [Int32] = []
        for _ in 0..<3 { clients.append(connectBlocking(listener.port)) }
        let go = Atomic<Bool>(false)
        let loopReady = Atomic<Bool>(false)
        let thread = TKThread {
            // Every descriptor the loops need exists from here on (a first run also touches the
            // main loop, for Dispatch's main queue).
            let loop = TKRunLoop.current
            _ = loop.run(mode: "nothing", before: .now)
            loopReady.store(true, ordering: .releasing)
            while !go.load(ordering: .acquiring) { usleep(1_000) }
            listener.schedule(in: loop, forMode: .default)
            let deadline = ContinuousClock.now + .seconds(30)
            while accepted.load(ordering: .relaxed) < 3 && ContinuousClock.now < deadline {
                _ = loop.run(mode: .default, before: .now + .milliseconds(50))
            }
        }
        thread.start()
        while !loopReady.load(ordering: .acquiring) { usleep(1_000) }
        let fillers = exhaustDescriptors()
        go.store(true, ordering: .releasing)
        let cpuBefore = cpuMilliseconds()
        usleep(500_000)
        let cpu = cpuMilliseconds() - cpuBefore
        let acceptedWhileFull = accepted.load(ordering: .relaxed)
        for fd in fillers { close(fd) }
        _ = thread.join(until: .now + .seconds(30))
        Console.out("accepted \(accepted.load(ordering: .relaxed)) while-full \(acceptedWhileFull) cpu-ms \(cpu)")
        for fd in clients { close(fd) }
        listener.invalidate()
        return 0
    }
}
