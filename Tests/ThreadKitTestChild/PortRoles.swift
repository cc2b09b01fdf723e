// PortRoles: the other process of the socket-port tests. Addresses are written `tcp:PORT`,
// `tcp:HOST:PORT` or `unix:PATH`; a listener given `tcp:0` picks a free port. Each role prints
// what it did on standard output, one line per event. port-echo (with the address helpers) has a
// copy among the tour's children (Sources/threadkit/Tour/TourChildren.swift); the tests judge this one.
import Glibc
import Synchronization
import ThreadKit

enum PortRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "port-send", usage: "ADDRESS COUNT [BYTES] (send COUNT messages, msgid 0…COUNT-1, to a listener; print \"sent COUNT\")"
        ) { args in
            guard args.count >= 2, let count = Int(args[1]), let port = remotePort(args[0]) else { return 2 }
            let payload = [UInt8](repeating: 7, count: args.count > 2 ? Int(args[2]) ?? 0 : 0)
            for i in 0..<count {
                let message = TKPortMessage(sendPort: port, receivePort: nil, components: payload.isEmpty ? [] : [.data(payload)])
                message.msgid = UInt32(i)
                guard message.send(before: .now + .seconds(60)) else {
                    Console.err("send \(i) failed: \(message.failureReason ?? "?")")
                    return 1
                }
            }
            Console.out("sent \(count)")
            return 0
        },
        ChildRole(
            name: "port-echo",
            usage:
                "ADDRESS [FILE] (listen; print \"listening ADDRESS\" (and write ADDRESS to FILE); answer each message through its reply port with msgid+1 and the same components; exit on msgid 0xFFFFFFFF)"
        ) { args in
            guard let port = listeningPort(args.first ?? "tcp:0") else { return 2 }
            let echo = Echo()
            port.delegate = echo
            let loop = TKRunLoop.current
            loop.add(port, forMode: .default)
            if args.count > 1 { writeFile(args[1], describe(port) + "\n") } else { Console.out("listening \(describe(port))") }
            while !echo.finished.load(ordering: .acquiring) {
                _ = loop.run(mode: .default, before: .now + .seconds(3600))
            }
            port.invalidate()
            return 0
        },
    ]

    /// Answers every message through its reply port.
    final class Echo: TKPortDelegate {
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

    /// Writes `text` to a new file at `path`, whole: a reader polling for the file sees all or nothing.
    static func writeFile(_ path: String, _ text: String) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return }
        var text = text
        text.withUTF8 { _ = write(fd, $0.baseAddress, $0.count) }
        close(fd)
        rename(temporary, path)
    }

    /// `tcp:PORT`, `tcp:HOST:PORT` or `unix:PATH` as a remote (sending) port.
    static func remotePort(_ address: String) -> TKSocketPort? {
        let parts = address.split(separator: ":", maxSplits: 2).map(String.init)
        switch (parts.first, parts.count) {
        case ("tcp", 2): return UInt16(parts[1]).flatMap { try? TKSocketPort(remoteHost: "127.0.0.1", port: $0) }
        case ("tcp", 3): return UInt16(parts[2]).flatMap { try? TKSocketPort(remoteHost: parts[1], port: $0) }
        case ("unix", 2): return try? TKSocketPort(unixSocketPath: parts[1], remote: true)
        default: return nil
        }
    }

    /// `tcp:PORT` or `unix:PATH` as a listening port.
    static func listeningPort(_ address: String) -> TKSocketPort? {
        let parts = address.split(separator: ":", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case "tcp": return UInt16(parts[1]).flatMap { try? TKSocketPort(tcpPort: $0) }
        case "unix": return try? TKSocketPort(unixSocketPath: parts[1])
        default: return nil
        }
    }

    /// The address form above for a listening port.
    static func describe(_ port: TKSocketPort) -> String {
        switch port.address {
        case .tcp(_, let number): return "tcp:\(number)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}
