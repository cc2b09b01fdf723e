// QueueListing: `threadkit-postgres queue NAME [--state STATE] [--limit N]`: a queue's statistics
// and its operations (id, kind, state, priority, attempts, token, worker, open dependencies, last
// error), read from the server TK_POSTGRES_URL names. Runs on the main thread.
#if Postgres
    import ChildProcessRoles
    import ThreadKit
    import ThreadKitPostgres

    enum QueueListing {
        static func run(_ arguments: [String]) -> Int32 {
            var name: String?
            var states: [String]?
            var limit = 50
            var rest = arguments[...]
            while let argument = rest.popFirst() {
                switch argument {
                case "--state":
                    guard let value = rest.popFirst() else { return usage() }
                    states = value.split(separator: ",").map(String.init)
                case "--limit":
                    guard let value = rest.popFirst(), let n = Int(value), n >= 0 else { return usage() }
                    limit = n
                default:
                    if name != nil || argument.hasPrefix("--") { return usage() }
                    name = argument
                }
            }
            guard let name else { return usage() }
            do {
                let queue = try TKPostgresOperationQueue(name: name)
                let statistics = try queue.statistics()
                let limitText = try queue.maxConcurrentOperationCount()
                Console.out("queue \"\(queue.name)\" (maxConcurrentOperationCount \(limitText == -1 ? "unlimited" : String(limitText)))")
                Console.out(
                    "  depth \(statistics.depth) (ready \(statistics.ready)), running \(statistics.running), retried \(statistics.retried), "
                        + "dead \(statistics.dead), finished \(statistics.finished), cancelled \(statistics.cancelled), oldest waiting "
                        + (statistics.oldestPendingAge.map { "\($0)" } ?? "-"))
                let records = try queue.operations(states: states, limit: limit)
                if records.isEmpty { return 0 }
                Console.out("  id        kind              state      prio  attempt  token     deps  worker / last error")
                for record in records {
                    let tail = [record.worker, record.lastError].compactMap { $0 }.joined(separator: " / ")
                    Console.out(
                        "  " + pad(String(record.id), 9) + " " + pad(record.kind + (record.isBarrier ? " [barrier]" : ""), 17) + " "
                            + pad(record.state + (record.cancelRequested && record.state == "running" ? "*" : ""), 10) + " "
                            + pad(String(record.priority), 5) + " " + pad("\(record.attempt)/\(record.maxAttempts)", 8) + " "
                            + pad(String(record.token), 9) + " " + pad(String(record.openDependencies), 5) + " " + tail)
                }
                return 0
            } catch {
                Console.err("threadkit-postgres queue: \(error)")
                return 1
            }
        }

        static func pad(_ text: String, _ width: Int) -> String {
            text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
        }

        static func usage() -> Int32 {
            Console.err("usage: threadkit-postgres queue NAME [--state pending,running,finished,cancelled,dead] [--limit N]")
            return 2
        }
    }
#endif
