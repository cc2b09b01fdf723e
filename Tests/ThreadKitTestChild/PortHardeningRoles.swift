// PortHardeningRoles: hostile peers and exhausted resources against a listening TKSocketPort, each
// in a process of its own so its memory, descriptors, umask or user can be measured or changed
// (Tests/ThreadKitTests/SocketPortHardeningTests.swift). Hostile frames are written byte by byte
// with plain sockets (docs/Ports.md, "Wire format"). Each role prints one line of `key value`
// pairs on standard output.
//   port-component-flood COUNT   one frame announcing COUNT port components, streamed
//   port-frame-budget MIB N EACH budget MIB; N connections each leave EACH MiB of a 60 MiB frame
//   port-listener-emfile         a listening port out of descriptors
//   port-unix-mode PATH          listens at PATH under umask 0; prints the file's mode
//   port-send-as UID ADDR COUNT  becomes UID, then sends as port-send
//   port-remote-cost N           resident kB per held remote port, and per control buffer
//   port-auth-flood MODE N       a shared-key listener; a key holder sends N 1 MiB messages while
//                                (MODE attack) 6 connections without the key each stream a
//                                60 MiB frame, or (MODE control) nobody else; prints what
//                                arrived, what was refused and the peak RSS (ru_maxrss)
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum PortHardeningRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "port-component-flood",
            usage: "COUNT (stream one frame of COUNT port components at a listener; print what it refused and the memory used)"
        ) { args in
            componentFlood(count: args.first.flatMap(Int.init) ?? 1_000_000)
        },
        ChildRole(
            name: "port-frame-budget",
            usage: "MIB N EACH (budget MIB; N connections each send EACH MiB of a 60 MiB frame; print shed, max-held, rss growth)"
        ) { args in
            guard args.count == 3, let budget = Int(args[0]), let clients = Int(args[1]), let each = Int(args[2]) else { return 2 }
            return frameBudget(budgetMiB: budget, clients: clients, eachMiB: each)
        },
        ChildRole(name: "port-listener-emfile", usage: "(a listening port out of descriptors: print \"received 3 while-full 0 cpu-ms N\")")
        { _ in
            listenerOutOfDescriptors()
        },
        ChildRole(name: "port-unix-mode", usage: "PATH (umask 0, listen at PATH, print \"mode OCTAL\")") { args in
            guard let path = args.first else { return 2 }
            umask(0)
            guard let port = try? TKSocketPort(unixSocketPath: path) else { return 1 }
            var status = stat()
            guard stat(path, &status) == 0 else { return 1 }
            Console.out("mode \(String(status.st_mode & 0o777, radix: 8))")
            port.invalidate()
            return 0
        },
        ChildRole(
            name: "port-remote-cost", usage: "N (hold N remote ports, then N untouched 64 KiB buffers; print the resident kB each costs)"
        ) { args in
            remoteCost(count: args.first.flatMap(Int.init) ?? 20_000)
        },
        ChildRole(
            name: "port-auth-flood",
            usage:
                "MODE N (attack|control: a key holder sends N 1 MiB messages to a shared-key listener, with or without 6 keyless 60 MiB frames streaming; print delivered, refused, maxrss-kb)"
        ) { args in
            guard args.count == 2, ["attack", "control"].contains(args[0]), let count = Int(args[1]) else { return 2 }
            return authFlood(attack: args[0] == "attack", messages: count)
        },
        ChildRole(name: "port-send-as", usage: "UID ADDRESS COUNT (setgid/setuid to UID, then send COUNT messages as port-send)") { args in
            guard args.count == 3, let uid = UInt32(args[0]) else { return 2 }
            guard setgroups(0, nil) == 0, setgid(uid) == 0, setuid(uid) == 0 else {
                Console.err("cannot become uid \(uid): errno \(errno)")
                return 3
            }
            guard let send = PortRoles.all.first(where: { $0.name == "port-send" }) else { return 2 }
            return send.run([args[1], args[2]])
        },
    ]

    // MARK: A listening port on a loop thread, with a record of what it received and refused

    final class Receiver: TKPortDelegate, @unchecked Sendable {
        let port: TKSocketPort
        let received = Atomic<Int>(0)
        let refusalCount = Atomic<Int>(0)
        private let lock = TKLock()
        private var reasons: [String] = [] // guarded by lock
        private let stop = Atomic<Bool>(false)
        private var thread: TKThread?

        init(_ port: TKSocketPort) {
            self.port = port
        }

        /// Runs the port on a loop thread of its own.
        func start() {
            port.delegate = self
            port.connectionErrorHandler = { [weak self] error in
                guard let self else { return }
                lock.lock()
                reasons.append(error.message)
                lock.unlock()
                refusalCount.wrappingAdd(1, ordering: .releasing)
            }
            let thread = TKThread { [self] in
                let loop = TKRunLoop.current
                loop.add(port, forMode: .default)
                while !stop.load(ordering: .acquiring) { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
            }
            self.thread = thread
            thread.start()
        }

        func handlePortMessage(_ message: TKPortMessage) { received.wrappingAdd(1, ordering: .releasing) }

        var refusals: [String] {
            lock.lock()
            defer { lock.unlock() }
            return reasons
        }

        func finish() {
            stop.store(true, ordering: .releasing)
            _ = thread?.join(until: .now + .seconds(30))
            port.invalidate()
        }
    }

    /// Polls `condition` every millisecond until it holds or `seconds` pass.
    static func wait(seconds: Int = 30, _ condition: () -> Bool) -> Bool {
        pollUntil(.now + .seconds(seconds), condition)
    }

    // MARK: What a held remote port costs

    /// Resident memory of N held remote ports, against a control that costs what the leak the
    /// test looks for would: N 64 KiB buffers (a listening port's read buffer) of which only
    /// malloc's header is touched. Single-threaded, so the process's one malloc arena serves both
    /// and no other thread allocates meanwhile: the figures do not depend on the CPU count.
    /// Prints `ports N port-kb X control-kb Y` (kB per object, 2 decimals).
    static func remoteCost(count: Int) -> Int32 {
        func path(_ i: Int) -> String { "/tmp/tk-held-\(i).sock" }
        // Warm up: type metadata, string storage and the like, made by the first ports.
        for i in 0..<100 { _ = try? TKSocketPort(unixSocketPath: path(i), remote: true) }
        var ports: [TKSocketPort] = []
        ports.reserveCapacity(count)
        let before = statusKB("VmRSS")
        for i in 0..<count {
            guard let port = try? TKSocketPort(unixSocketPath: path(i), remote: true) else { return 1 }
            ports.append(port)
        }
        let portKB = Double(statusKB("VmRSS") - before) / Double(count)
        var buffers: [UnsafeMutableRawPointer] = []
        buffers.reserveCapacity(count)
        let controlBefore = statusKB("VmRSS")
        for _ in 0..<count {
            guard let buffer = malloc(64 << 10) else { return 1 }
            buffers.append(buffer)
        }
        let controlKB = Double(statusKB("VmRSS") - controlBefore) / Double(count)
        func shown(_ value: Double) -> String { "\(Int(value)).\(String(String(Int(value * 100) % 100 + 100).dropFirst()))" }
        Console.out("ports \(ports.count) port-kb \(shown(portKB)) control-kb \(shown(controlKB))")
        for buffer in buffers { free(buffer) }
        return 0
    }

    /// A field of /proc/self/status in kB (VmRSS, VmHWM).
    static func statusKB(_ field: String) -> Int {
        let fd = open("/proc/self/status", O_RDONLY)
        guard fd >= 0 else { return -1 }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let n = read(fd, &bytes, bytes.count)
        guard n > 0 else { return -1 }
        for line in String(decoding: bytes[0..<n], as: UTF8.self).split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
        }
        return -1
    }

    /// Resets VmHWM to the current RSS (Linux: "5" into clear_refs).
    static func resetPeak() {
        let fd = open("/proc/self/clear_refs", O_WRONLY)
        guard fd >= 0 else { return }
        _ = write(fd, "5", 1)
        close(fd)
    }

    static func u32(_ value: Int) -> [UInt8] {
        [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
    static func u16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }

    /// Writes all of `bytes` (blocking socket): false once the listener closed the connection.
    static func send(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    // MARK: Item 1: a frame of a million port components

    private static func componentFlood(count: Int) -> Int32 {
        guard let port = try? TKSocketPort(tcpPort: 0), let number = port.localPort else { return 1 }
        let receiver = Receiver(port)
        receiver.start()
        defer { receiver.finish() }
        resetPeak()
        let baseline = statusKB("VmRSS")
        // Each component: kind 1, TCP family, a port, "127.0.0.1", a distinct port number.
        let host = Array("127.0.0.1".utf8)
        let componentLength = 1 + 1 + 2 + 2 + host.count
        let bodyLength = 4 + 1 + 4 + 1 + 4 + count * componentLength
        let head = u32(bodyLength) + Array("TKPM".utf8) + [1] + u32(7) + [0] + u32(count)
        let fd = RunLoopIORoles.connectBlocking(number)
        guard fd >= 0 else { return 1 }
        var sent = head.count
        var open = send(fd, head)
        var chunk: [UInt8] = []
        var i = 0
        while open && i < count {
            chunk.removeAll(keepingCapacity: true)
            while i < count && chunk.count < 64 << 10 {
                chunk += [1, 1] + u16(i % 65_535 + 1) + u16(host.count) + host
                i += 1
            }
            open = send(fd, chunk)
            if open { sent += chunk.count }
        }
        let refused = wait { receiver.refusalCount.load(ordering: .acquiring) >= 1 }
        close(fd)
        let growth = statusKB("VmHWM") - baseline
        // The listener carries on: a message with the most port components allowed arrives.
        guard let remote = try? TKSocketPort(remoteHost: "127.0.0.1", port: number) else { return 1 }
        var components: [TKPortMessage.Component] = []
        for k in 0..<256 { components.append(.port((try? TKSocketPort(remoteHost: "127.0.0.1", port: UInt16(40_000 + k)))!)) }
        let message = TKPortMessage(sendPort: remote, receivePort: nil, components: components)
        let sentGood = message.send(before: .now + .seconds(30))
        let delivered = sentGood && wait { receiver.received.load(ordering: .acquiring) >= 1 }
        let reason = receiver.refusals.first ?? "none"
        Console.out(
            "refused \(refused) sent-kb \(sent / 1024) of-kb \((bodyLength + 4) / 1024) hwm-growth-kb \(growth) delivered \(delivered ? 1 : 0)"
        )
        Console.out("reason \(reason)")
        return 0
    }

    // MARK: Item 2: many connections with big unfinished frames

    private static func frameBudget(budgetMiB: Int, clients: Int, eachMiB: Int) -> Int32 {
        TKSocketPort.unfinishedFrameBudget = budgetMiB << 20
        guard let port = try? TKSocketPort(tcpPort: 0), let number = port.localPort else { return 1 }
        let receiver = Receiver(port)
        receiver.start()
        defer { receiver.finish() }
        // Sample what the ports hold while the clients write.
        let maxHeld = Atomic<Int>(0)
        let sampling = Atomic<Bool>(true)
        let sampler = TKThread {
            while sampling.load(ordering: .acquiring) {
                let held = TKSocketPort.unfinishedFrameBytes
                if held > maxHeld.load(ordering: .relaxed) { maxHeld.store(held, ordering: .relaxed) }
                usleep(200)
            }
        }
        sampler.start()
        resetPeak()
        let baseline = statusKB("VmRSS")
        // A 60 MiB frame of one data component, of which each client sends EACH MiB.
        let frameBody = 60 << 20
        let head = u32(frameBody) + Array("TKPM".utf8) + [1] + u32(1) + [0] + u32(1) + [0] + u32(frameBody - 19)
        let payload = [UInt8](repeating: 0xAB, count: eachMiB << 20)
        var fds: [Int32] = []
        for _ in 0..<clients {
            let fd = RunLoopIORoles.connectBlocking(number)
            guard fd >= 0 else { return 1 }
            fds.append(fd)
            _ = send(fd, head) && send(fd, payload)
        }
        // Each survivor holds at least EACH MiB, so at most budget / EACH of them survive.
        let mustShed = max(0, clients - budgetMiB / max(eachMiB, 1))
        let shedEnough = wait { receiver.refusalCount.load(ordering: .acquiring) >= mustShed }
        let growth = statusKB("VmHWM") - baseline
        let shed = receiver.refusalCount.load(ordering: .acquiring)
        let budgetReasons = receiver.refusals.filter { $0.contains("budget") }.count
        // The survivors hang up: what they held comes back, and a small message still arrives.
        for fd in fds { close(fd) }
        let released = wait { TKSocketPort.unfinishedFrameBytes == 0 }
        guard let remote = try? TKSocketPort(remoteHost: "127.0.0.1", port: number) else { return 1 }
        let message = TKPortMessage(sendPort: remote, receivePort: nil, components: [.data([1, 2, 3])])
        let delivered = message.send(before: .now + .seconds(30)) && wait { receiver.received.load(ordering: .acquiring) >= 1 }
        sampling.store(false, ordering: .releasing)
        sampler.join()
        Console.out(
            "shed \(shed) must-shed \(mustShed) shed-enough \(shedEnough) budget-reasons \(budgetReasons) max-held \(maxHeld.load(ordering: .relaxed)) "
                + "budget \(budgetMiB << 20) hwm-growth-kb \(growth) released \(released) delivered \(delivered ? 1 : 0)")
        return 0
    }

    // MARK: Issue 2: connections without the key against a shared-key listener

    /// A listener with a shared key. With `attack`, 6 connections without the key each stream a
    /// 60 MiB frame: four as wire version 1's authenticated envelope (which a verifying listener
    /// used to buffer whole before checking), two as segments of a 60 MiB message signed with
    /// another key (a first segment, then 64 KiB ones); meanwhile a key holder sends
    /// `messages` messages of 1 MiB. The peak RSS is compared by the test against a `control`
    /// run, the same without the attackers (the attackers' own memory, one 1 MiB chunk, exists in
    /// both). Prints `sent-true A sent-false B delivered C refused R attackers-cut-off E
    /// attacker-max-kb K maxrss-kb M`.
    private static func authFlood(attack: Bool, messages: Int) -> Int32 {
        let key = Array("the flood test's shared key, 32B".utf8)
        guard let port = try? TKSocketPort(tcpPort: 0), let number = port.localPort,
            let listenerKey = try? TKSocketPortAuthenticator.sharedKey(key),
            let holderKey = try? TKSocketPortAuthenticator.sharedKey(key)
        else { return 1 }
        port.authenticator = listenerKey
        let receiver = Receiver(port)
        receiver.start()
        defer { receiver.finish() }
        let chunk = [UInt8](repeating: 0xAB, count: 1 << 20)
        let frameBody = 60 << 20
        let envelopeHead =
            u32(frameBody) + Array("TKPA".utf8) + Array("TKPM".utf8) + [1] + u32(1) + [0] + u32(1) + [0] + u32(frameBody - 27)
        // segment := "TKPS" 2 message:u64 index:u32 total:u32 data auth n:u16 (docs/Ports.md).
        func segment(_ index: Int, _ data: Int) -> [UInt8] {
            let body =
                Array("TKPS".utf8) + [2] + u32(0x0BAD) + u32(0xF00D) + u32(index) + u32(frameBody) + [UInt8](repeating: 0xCD, count: data)
                + [UInt8](repeating: 0xEE, count: 32) + u16(32)
            return u32(body.count) + body
        }
        let segmentHead = segment(0, 1_024)
        let laterSegment = segment(1, 64 << 10)
        let attackers = attack ? 6 : 0
        let connected = Atomic<Int>(0)
        let cutOff = Atomic<Int>(0)
        let attackerMaxKB = Atomic<Int>(0)
        var threads: [TKThread] = []
        for i in 0..<attackers {
            let thread = TKThread {
                let fd = RunLoopIORoles.connectBlocking(number)
                connected.wrappingAdd(1, ordering: .releasing)
                guard fd >= 0 else { return }
                let segmented = i >= 4
                var sent = 0
                var open = send(fd, segmented ? segmentHead : envelopeHead)
                while open && sent < frameBody {
                    open = send(fd, segmented ? laterSegment : chunk)
                    if open { sent += segmented ? laterSegment.count : chunk.count }
                }
                if !open { cutOff.wrappingAdd(1, ordering: .relaxed) }
                if sent >> 10 > attackerMaxKB.load(ordering: .relaxed) { attackerMaxKB.store(sent >> 10, ordering: .relaxed) }
                close(fd)
            }
            thread.start()
            threads.append(thread)
        }
        while connected.load(ordering: .acquiring) < attackers { usleep(1_000) }
        guard let holder = try? TKSocketPort(remoteHost: "127.0.0.1", port: number) else { return 1 }
        holder.authenticator = holderKey
        let payload = [UInt8](repeating: 0x5A, count: 1 << 20)
        var sentTrue = 0
        var sentFalse = 0
        for i in 0..<messages {
            let message = TKPortMessage(sendPort: holder, receivePort: nil, components: [.data(payload)])
            message.msgid = UInt32(i)
            if message.send(before: .now + .seconds(30)) { sentTrue += 1 } else { sentFalse += 1 }
        }
        _ = wait { receiver.received.load(ordering: .acquiring) >= sentTrue }
        for thread in threads { _ = thread.join(until: .now + .seconds(60)) }
        _ = wait { receiver.refusalCount.load(ordering: .acquiring) >= attackers }
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        Console.out(
            "sent-true \(sentTrue) sent-false \(sentFalse) delivered \(receiver.received.load(ordering: .acquiring)) "
                + "refused \(receiver.refusalCount.load(ordering: .acquiring)) attackers-cut-off \(cutOff.load(ordering: .relaxed)) "
                + "attacker-max-kb \(attackerMaxKB.load(ordering: .relaxed)) maxrss-kb \(usage.ru_maxrss)")
        for reason in receiver.refusals { Console.out("reason \(reason)") }
        holder.invalidate()
        return 0
    }

    // MARK: Item 3: accept() out of descriptors

    private static func listenerOutOfDescriptors() -> Int32 {
        guard let port = try? TKSocketPort(tcpPort: 0), let number = port.localPort else { return 1 }
        // Three clients wait in the backlog, each with a whole frame sent, before the port runs.
        var clients: [Int32] = []
        for i in 0..<3 {
            let fd = RunLoopIORoles.connectBlocking(number)
            guard fd >= 0 else { return 1 }
            _ = send(fd, u32(4 + 1 + 4 + 1 + 4) + Array("TKPM".utf8) + [1] + u32(i) + [0] + u32(0))
            clients.append(fd)
        }
        let receiver = Receiver(port)
        // Every descriptor the loop needs exists before the limit is lowered; the port joins it later.
        let go = Atomic<Bool>(false)
        let loopReady = Atomic<Bool>(false)
        let stop = Atomic<Bool>(false)
        port.delegate = receiver
        let thread = TKThread {
            let loop = TKRunLoop.current
            _ = loop.run(mode: "nothing", before: .now)
            loopReady.store(true, ordering: .releasing)
            while !go.load(ordering: .acquiring) { usleep(1_000) }
            loop.add(port, forMode: .default)
            while !stop.load(ordering: .acquiring) { _ = loop.run(mode: .default, before: .now + .milliseconds(50)) }
        }
        thread.start()
        while !loopReady.load(ordering: .acquiring) { usleep(1_000) }
        let fillers = RunLoopIORoles.exhaustDescriptors()
        go.store(true, ordering: .releasing)
        let cpuBefore = RunLoopIORoles.cpuMilliseconds()
        usleep(500_000)
        let cpu = RunLoopIORoles.cpuMilliseconds() - cpuBefore
        let whileFull = receiver.received.load(ordering: .acquiring)
        for fd in fillers { close(fd) }
        _ = wait { receiver.received.load(ordering: .acquiring) >= 3 }
        stop.store(true, ordering: .releasing)
        _ = thread.join(until: .now + .seconds(30))
        Console.out("received \(receiver.received.load(ordering: .acquiring)) while-full \(whileFull) cpu-ms \(cpu)")
        for fd in clients { close(fd) }
        port.invalidate()
        return 0
    }
}
