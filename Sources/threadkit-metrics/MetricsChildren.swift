// MetricsChildren: `threadkit-metrics tour --child ROLE ARGUMENT...` (hidden: not in `--help`), the
// child processes ThreadKitMetricsTests start where a test needs a process of its own: its memory
// measured from outside, its standard error captured, or its death by a misuse. Each role prints
// what the test reads on standard output.
//   serve PAGE_BYTES MAX_CONNECTIONS SEND_MS   an endpoint serving a fresh PAGE_BYTES page per
//                                              rendering; prints "port N", serves until standard
//                                              input ends, then prints its statistics
//   series COUNT LIMIT                         COUNT named queues, two items each, then COUNT / 2
//                                              more, exported with seriesLimit LIMIT; prints the page
//   series-limit-negative                      TKMetricsExporter(seriesLimit: -1): a misuse stop
// Threads: each role runs on the child's main thread.
import ChildProcessRoles
import Glibc
import Prometheus
import ThreadKit
import ThreadKitMetrics

enum MetricsChildren {
    static func main(_ arguments: [String]) -> Int32 {
        ChildRole.main(roles, arguments, header: "threadkit-metrics tour --child: the test's child processes are:")
    }

    static let roles: [ChildRole] = [
        ChildRole(name: "serve", usage: "PAGE_BYTES MAX_CONNECTIONS SEND_MS") { args in
            guard args.count == 3, let bytes = Int(args[0]), let cap = Int(args[1]), let sendMS = Int(args[2]) else { return 2 }
            return serve(pageBytes: bytes, limits: .init(maxConnections: cap, sendTimeout: .milliseconds(sendMS)))
        },
        ChildRole(name: "series", usage: "COUNT LIMIT") { args in
            guard args.count == 2, let count = Int(args[0]), let limit = Int(args[1]) else { return 2 }
            return series(count: count, limit: limit)
        },
        ChildRole(name: "series-limit-negative", usage: "(stops the process: a misuse)") { _ in
            _ = TKMetricsExporter(seriesLimit: -1)
            return 0
        },
    ]

    /// Serves a page of `pageBytes` bytes, made afresh for every rendering (as
    /// `PrometheusCollectorRegistry.emitToBuffer()` does), until standard input ends.
    static func serve(pageBytes: Int, limits: TKMetricsHTTPEndpoint.Limits) -> Int32 {
        let endpoint: TKMetricsHTTPEndpoint
        do {
            endpoint = try TKMetricsHTTPEndpoint(limits: limits) {
                var page = [UInt8](repeating: UInt8(ascii: "a"), count: pageBytes)
                for i in stride(from: 79, to: pageBytes, by: 80) { page[i] = 10 }
                return page
            }
        } catch {
            Console.err("serve: \(error)")
            return 1
        }
        Console.out("port \(endpoint.port)")
        var scratch = [UInt8](repeating: 0, count: 256)
        while true {
            let n = read(0, &scratch, scratch.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
        }
        let s = endpoint.statistics
        endpoint.stop()
        Console.out(
            "statistics accepted \(s.accepted) refused \(s.refused) served \(s.served) renderings \(s.renderings) "
                + "sendTimeouts \(s.sendTimeouts) peakBytesInFlight \(s.peakBytesInFlight)")
        return 0
    }

    /// `count` queues named series-0… with two items each, a report, then `count / 2` more and
    /// another report; prints the Prometheus page.
    static func series(count: Int, limit: Int) -> Int32 {
        let registry = PrometheusCollectorRegistry()
        do { try TKMetrics.setSamplingInterval(1) } catch { return 1 }
        let exporter = TKMetricsExporter.start(
            interval: .seconds(3600), factory: PrometheusMetricsFactory(registry: registry), seriesLimit: limit)
        func run(_ names: Range<Int>) {
            let group = TKDispatchGroup()
            var queues: [TKDispatchQueue] = []
            for i in names {
                let queue = TKDispatchQueue(label: "series-\(i)")
                queues.append(queue)
                queue.async(group: group) {}
                queue.async(group: group) {}
            }
            group.wait()
            exporter.report()
        }
        run(0..<count)
        run(count..<(count + count / 2))
        exporter.stop()
        Console.out(registry.emitToString())
        return 0
    }
}
