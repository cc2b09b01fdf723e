// EndpointLimitTests: TKMetricsHTTPEndpoint against clients that try to hold it (issue 49,
// findings 2 and 3; docs/Metrics.md §3, "Limits"): clients that request the page and never read
// (a child process, judged by its peak RSS read from /proc and by each connection seen closed from
// the client side), connections that never finish their request head (closed after the header
// timeout, never before), connections past the cap (refused while a scrape still gets through),
// one shared rendering per interval, the bytes-in-flight cap, and limits out of range. The clients
// are plain blocking sockets (TestClient.swift).
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit
import ThreadKitMetrics
import XCTest

final class EndpointLimitTests: XCTestCase {
    typealias Limits = TKMetricsHTTPEndpoint.Limits

    /// Finding 2: 100 clients request an 8 MB page with a 16 KiB receive buffer and never read.
    /// Each connection used to keep its own copy (100 × 8 MB). In a child with the default limits
    /// but a 1 s send timeout: its peak RSS grows by under 100 MB, and every connection is closed —
    /// those past the cap of 64 refused at once, the others reset at the send timeout.
    func testClientsThatNeverReadCostNoCopyEachAndAreDropped() throws {
        let page = 8_000_000
        let child = try MetricsChild("serve", ["\(page)", "64", "1000"])
        let started = ContinuousClock.now
        let portLine = try XCTUnwrap(child.line(before: started + .seconds(60)), "the child did not print its port")
        let port = try XCTUnwrap(UInt16(portLine.dropFirst("port ".count)), portLine)
        // VmHWM from here on: "5" into clear_refs resets it to the current RSS.
        let clear = open("/proc/\(child.pid)/clear_refs", O_WRONLY)
        XCTAssertGreaterThanOrEqual(clear, 0, "cannot open /proc/\(child.pid)/clear_refs")
        _ = write(clear, "5", 1)
        close(clear)
        let baseline = try XCTUnwrap(statusKB("VmRSS", pid: child.pid))

        var clients: [TestConnection] = []
        for _ in 0..<100 {
            let client = try TestConnection(port: port, receiveBuffer: 16_384)
            client.sendRequest()
            clients.append(client)
        }
        let closedAt = waitUntilClosed(clients, deadline: .now + .seconds(60))
        let peak = try XCTUnwrap(statusKB("VmHWM", pid: child.pid))
        let result = child.finish(before: .now + .seconds(60))

        XCTAssertEqual(closedAt.filter { $0 == nil }.count, 0, "connections the server never closed")
        XCTAssertLessThan(peak - baseline, 100 * 1024, "peak RSS grew from \(baseline) kB to \(peak) kB")
        XCTAssertEqual(result.status, 0, result.error)
        // statistics accepted A refused R served S renderings N sendTimeouts T peakBytesInFlight B
        let words = result.output.split(separator: "\n").last { $0.hasPrefix("statistics ") }?.split(separator: " ") ?? []
        func stat(_ name: String) -> Int? { words.firstIndex { $0 == name }.flatMap { Int(words[$0 + 1]) } }
        let accepted = try XCTUnwrap(stat("accepted"), result.output)
        XCTAssertGreaterThanOrEqual(accepted, 64)
        XCTAssertEqual(accepted + (stat("refused") ?? -1), 100, result.output)
        XCTAssertEqual(stat("sendTimeouts"), accepted, result.output)
        XCTAssertLessThanOrEqual(try XCTUnwrap(stat("peakBytesInFlight")), 64 << 20 + 2 * (page + 200), result.output)
    }

    /// Finding 3: 25 connections never finish their request head — 10 silent, 10 with half a
    /// head, 5 trickling a byte every 100 ms. All are closed after the 1 s header timeout, none
    /// before it (from the client's connect), and a scrape then succeeds.
    func testConnectionsThatDoNotSendTheirHeadAreClosedAfterTheHeaderTimeout() throws {
        let endpoint = try TKMetricsHTTPEndpoint(limits: Limits(headerTimeout: .seconds(1))) { Array("up 1\n".utf8) }
        defer { endpoint.stop() }
        var clients: [TestConnection] = []
        for i in 0..<25 {
            let client = try TestConnection(port: endpoint.port)
            if i >= 10 { client.send("GET /metrics HTTP/1.1\r\nHost: 127.0") }
            clients.append(client)
        }
        let closedAt = waitUntilClosed(clients, deadline: .now + .seconds(30)) { closed in
            for i in 20..<25 where !closed[i] { clients[i].send("x") }
        }
        for (i, at) in closedAt.enumerated() {
            guard let at else {
                XCTFail("connection \(i) still open 30 s after it connected")
                continue
            }
            XCTAssertGreaterThanOrEqual(at - clients[i].connectedAt, .seconds(1), "connection \(i) closed before the header timeout")
        }
        XCTAssertEqual(try Exposition.get(port: endpoint.port, path: "/metrics").body, "up 1\n")
        XCTAssertEqual(endpoint.statistics.headerTimeouts, 25)
    }

    /// Finding 3: a cap of 8. Eight silent connections fill it, and a scrape still gets the page
    /// (it takes the slot of the oldest silent one). Eight clients that request the page and never
    /// read then hold every slot: 20 more connections are each answered 503 and closed at once,
    /// and so is a scrape; once those clients go, a scrape gets the page again.
    func testConnectionsPastTheCapAreRefusedWhileAScrapeStillGetsThrough() throws {
        let page = 4 << 20
        let limits = Limits(maxConnections: 8, headerTimeout: .seconds(120), sendTimeout: .seconds(120), socketSendBuffer: 65_536)
        let endpoint = try TKMetricsHTTPEndpoint(limits: limits) { [UInt8](repeating: UInt8(ascii: "a"), count: page) }
        defer { endpoint.stop() }
        let deadline = ContinuousClock.now + .seconds(60)

        let silent = try (0..<8).map { _ in try TestConnection(port: endpoint.port) }
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.accepted == 8 }, "\(endpoint.statistics)")
        let first = try Exposition.get(port: endpoint.port, path: "/metrics")
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(first.body.utf8.count, page)
        XCTAssertNotNil(waitUntilClosed([silent[0]], deadline: deadline)[0], "the oldest silent connection was not closed")
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.open == 7 }, "\(endpoint.statistics)")
        XCTAssertFalse(silent[1...].contains { $0.closedByServer })

        var holders = try (0..<8).map { _ in
            let client = try TestConnection(port: endpoint.port, receiveBuffer: 16_384)
            client.sendRequest()
            return client
        }
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.evicted == 8 && endpoint.statistics.open == 8 }, "\(endpoint.statistics)")
        XCTAssertFalse(waitUntilClosed(silent, deadline: deadline).contains { $0 == nil }, "a silent connection was left open")
        for i in 0..<20 {
            let extra = try TestConnection(port: endpoint.port)
            let response = String(decoding: extra.readToEnd() ?? [], as: UTF8.self)
            XCTAssertTrue(
                response.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"), "connection \(i) past the cap got: \(response.prefix(80))")
        }
        let scrape = try TestConnection(port: endpoint.port)
        scrape.sendRequest()
        let refused = String(decoding: scrape.readToEnd() ?? [], as: UTF8.self) // a reset reads as empty
        XCTAssertFalse(refused.hasPrefix("HTTP/1.1 200"), "a scrape past the cap was served")
        XCTAssertEqual(endpoint.statistics.refused, 21)
        XCTAssertFalse(holders.contains { $0.closedByServer }, "a client holding a slot was dropped before its send timeout")

        holders = []
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.open == 0 }, "\(endpoint.statistics)")
        let again = try Exposition.get(port: endpoint.port, path: "/metrics")
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(again.body.utf8.count, page)
    }

    /// Requests within the render interval share one rendering: the body closure runs once for
    /// 20 scrapes (counted by the closure itself), and every scrape gets its bytes.
    func testRequestsWithinTheRenderIntervalShareOneRendering() throws {
        let calls = Atomic<Int>(0)
        let endpoint = try TKMetricsHTTPEndpoint(limits: Limits(renderInterval: .seconds(600))) {
            let n = calls.add(1, ordering: .relaxed).newValue
            return Array("rendering \(n)\n".utf8)
        }
        defer { endpoint.stop() }
        for _ in 0..<20 { XCTAssertEqual(try Exposition.get(port: endpoint.port, path: "/metrics").body, "rendering 1\n") }
        XCTAssertEqual(calls.load(ordering: .relaxed), 1)
        XCTAssertEqual(endpoint.statistics.renderings, 1)
    }

    /// The bytes-in-flight cap: pages of 1 MiB rendered for every request (interval 0), a cap of
    /// 2 MiB. Two clients that never read hold two renderings; after that a request gets the
    /// newest one held instead of a third, until they go.
    func testPastTheBytesInFlightCapRequestsShareTheNewestRendering() throws {
        let calls = Atomic<Int>(0)
        let limits = Limits(
            headerTimeout: .seconds(120), sendTimeout: .seconds(120), renderInterval: .zero, maxBytesInFlight: 2 << 20,
            socketSendBuffer: 65_536)
        let endpoint = try TKMetricsHTTPEndpoint(limits: limits) {
            let n = calls.add(1, ordering: .relaxed).newValue
            var page = Array("rendering \(n)\n".utf8)
            page += [UInt8](repeating: UInt8(ascii: "a"), count: (1 << 20) - page.count)
            return page
        }
        defer { endpoint.stop() }
        let deadline = ContinuousClock.now + .seconds(60)
        var holders: [TestConnection] = []
        for n in 1...2 {
            let client = try TestConnection(port: endpoint.port, receiveBuffer: 16_384)
            client.sendRequest()
            holders.append(client)
            XCTAssertTrue(pollUntil(deadline) { calls.load(ordering: .relaxed) == n })
        }
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.bytesInFlight >= 2 << 20 }, "\(endpoint.statistics)")
        let stale = try Exposition.get(port: endpoint.port, path: "/metrics")
        XCTAssertTrue(stale.body.hasPrefix("rendering 2\n"), String(stale.body.prefix(20)))
        XCTAssertEqual(calls.load(ordering: .relaxed), 2)
        XCTAssertEqual(endpoint.statistics.staleServed, 1)
        holders = []
        XCTAssertTrue(pollUntil(deadline) { endpoint.statistics.open == 0 }, "\(endpoint.statistics)")
        XCTAssertTrue(try Exposition.get(port: endpoint.port, path: "/metrics").body.hasPrefix("rendering 3\n"))
    }

    func testLimitsOutOfRangeAreRefused() {
        let bad = [
            Limits(maxConnections: 0), Limits(headerTimeout: .zero), Limits(sendTimeout: .seconds(-1)),
            Limits(renderInterval: .seconds(-1)), Limits(maxBytesInFlight: 0), Limits(socketSendBuffer: 100),
        ]
        for limits in bad {
            XCTAssertThrowsError(try TKMetricsHTTPEndpoint(limits: limits) { [] }, "\(limits)") { error in
                XCTAssertEqual((error as? TKError)?.code, .invalidArgument)
                XCTAssertTrue((error as? TKError)?.message.contains("Fix:") == true, "\(error)")
            }
        }
        XCTAssertNoThrow(try TKMetricsHTTPEndpoint(limits: Limits(socketSendBuffer: nil)) { [] }.stop())
    }
}
