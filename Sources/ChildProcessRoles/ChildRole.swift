// ChildRole: one role a helper executable plays as a child process (`threadkit tour --child ROLE`,
// `ThreadKitTestChild ROLE`, `ThreadKitPostgresTestChild ROLE`), and the dispatch from the command
// line to it. A library target named by no product: the tour and the test children share it, so
// neither executable depends on the other and the shipped CLI links no test code.
import Glibc

/// A role: its name on the command line, a usage line, and its body (the arguments after the
/// name; the exit status).
package struct ChildRole: Sendable {
    package let name: String
    package let usage: String
    package let run: @Sendable ([String]) -> Int32

    package init(name: String, usage: String, run: @escaping @Sendable ([String]) -> Int32) {
        self.name = name
        self.usage = usage
        self.run = run
    }

    /// Runs the role named by `arguments.first`; with none, or an unknown name, prints `header`
    /// and every role's usage on standard error and returns 2.
    package static func main(_ roles: [ChildRole], _ arguments: [String], header: String) -> Int32 {
        guard let name = arguments.first, let role = roles.first(where: { $0.name == name }) else {
            Console.err(header + "\n" + roles.map { "  \($0.name) \($0.usage)" }.joined(separator: "\n"))
            return 2
        }
        return role.run(Array(arguments.dropFirst()))
    }
}
