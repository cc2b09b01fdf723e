// PortRoles: the other process of the socket-port tests. Addresses are written `tcp:PORT`,
// `tcp:HOST:PORT` or `unix:PATH`; a listener given `tcp:0` picks a free port. Each role prints
// what it did on standard output, one line per event. port-echo and the address
// helpers (PortAddress), which the tour also uses, are in Sources/ChildProcessRoles.
import ChildProcessRoles
import Glibc
import ThreadKit

enum PortRoles {
    static let all: [ChildRole] = [
        ChildRole(
            name: "port-send", usage: "ADDRESS COUNT [BYTES] (send COUNT messages, msgid 0…COUNT-1, to a listener; print \"sent COUNT\")"
        ) { args in
            guard args.count >= 2, let count = Int(args[1]), let port = PortAddress.remote(args[0]) else { return 2 }
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
        }
    ]
}
