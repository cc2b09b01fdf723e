// RunLoopRoles: run-loop behaviour that needs a process's own main thread running its main loop:
// the seed's two-source demo (CustomSourceDemo), whose events the tests judge from standard output.
import ThreadKit

enum RunLoopRoles {
    static let all: [ChildRole] = [
        ChildRole(name: "custom-source-demo", usage: "ROUNDS INTERVAL_MS (the seed's two-source demo on the main loop; prints one line per event)") { args in
            guard args.count == 2, let rounds = Int(args[0]), let ms = Int(args[1]), rounds > 0, ms >= 0 else { return 2 }
            let demo = CustomSourceDemo(rounds: rounds, interval: .milliseconds(ms)) { _ in }
            let (events, exit) = demo.run()
            for event in events {
                Console.out("event \(event.what.replacingSpaces) round=\(event.round) main=\(event.onMain) at_us=\(Int(event.at / .microseconds(1)))")
            }
            Console.out("exit \(exit.map { "\($0)" } ?? "none")")
            return 0
        },
    ]
}

private extension String {
    var replacingSpaces: String { String(map { $0 == " " ? "-" : $0 }) }
}
