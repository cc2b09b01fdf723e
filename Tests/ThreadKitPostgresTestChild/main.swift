// ThreadKitPostgresTestChild: `ThreadKitPostgresTestChild ROLE [ARGUMENT...]` runs one child
// process of ThreadKitPostgresTests (the roles: PostgresLockRoles.swift). A test-only helper
// executable, not a product; it links ThreadKitPostgres (and so PostgresNIO), which is why it is
// apart from Tests/ThreadKitTestChild: the core tests never build PostgresNIO.
import Glibc

struct ChildRole: Sendable {
    let name: String
    let usage: String
    let run: @Sendable ([String]) -> Int32
}

/// Unbuffered writes to standard output and error (a copy of the tour's Console: lines from
/// several processes appear in the order they were written). Any thread.
enum Console {
    static func out(_ line: String) { write(1, line + "\n") }
    static func err(_ line: String) { write(2, line + "\n") }

    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let name = arguments.first, let role = PostgresLockRoles.all.first(where: { $0.name == name }) else {
    Console.err(
        "usage: ThreadKitPostgresTestChild ROLE [ARGUMENT...] (a test helper, started by ThreadKitPostgresTests). Roles:\n"
            + PostgresLockRoles.all.map { "  \($0.name) \($0.usage)" }.joined(separator: "\n"))
    exit(2)
}
exit(role.run(Array(arguments.dropFirst())))
