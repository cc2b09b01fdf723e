// Socket ports with an authenticator against peers without the key, and key holders against the
// unfinished-frame budget (docs/Ports.md, "Wire format" and "What a peer can cost"). A signed
// message travels as segments, each verified before its data is kept; a verifying listener
// reads at most a small first segment from a connection before it has verified one, and its
// connections wait for the budget instead of being closed. Memory is measured in child
// processes (`ThreadKitTestChild port-auth-flood`, Tests/ThreadKitTestChild/PortHardeningRoles.swift)
// against a control run; what arrives is judged by the receiving delegate's own record, what was
// verified by the authenticator's own counts.
import Foundation
import Synchronization
import XCTest

@testable import ThreadKit

final class SocketPortAuthenticationTests: XCTestCase {
    /// `key value` pairs of a child's first output line.
    private func fields(_ output: String) -> [String: String] {
        let words = (output.split(separator: "\n").first ?? "").split(separator: " ").map(String.init)
        var result: [String: String] = [:]
        for i in stride(from: 0, to: words.count - 1, by: 2) { result[words[i]] = words[i + 1] }
        return result
    }

    /// A cheap hook pair (a token, not a MAC), counting what `verify` is given.
    private final class TokenHook: Sendable {
        final class Counts: Sendable {
            let calls = Atomic<Int>(0)
            let largest = Atomic<Int>(0)
        }
        let counts = Counts()
        let authenticator: TKSocketPortAuthenticator
        var calls: Int { counts.calls.load(ordering: .relaxed) }
        var largest: Int { counts.largest.load(ordering: .relaxed) }

        init(_ token: String) {
            let mine = Array(token.utf8)
            let counts = counts
            authenticator = TKSocketPortAuthenticator(
                sign: { _ in mine },
                verify: { body, data in
                    counts.calls.wrappingAdd(1, ordering: .relaxed)
                    if body.count > counts.largest.load(ordering: .relaxed) { counts.largest.store(body.count, ordering: .relaxed) }
                    return Array(data) == mine
                })
        }
    }

    /// Sets the process's unfinished-frame budget for one test.
    private func withBudget(_ bytes: Int, _ body: () throws -> Void) rethrows {
        let saved = TKSocketPort.unfinishedFrameBudget
        TKSocketPort.unfinishedFrameBudget = bytes
        defer { TKSocketPort.unfinishedFrameBudget = saved }
        try body()
    }

    // MARK: Keyless peers cost a small bound per connection

    func testKeylessFramesCannotMakeASharedKeyListenerHoldThemAndNoSentMessageIsLost() throws {
        // 6 connections without the key each stream a 60 MiB frame (4 as wire version 1's signed
        // envelope, 2 as segments signed with another key) while a key holder sends 8 messages
        // of 1 MiB; the control run is the same without them. Before segments the listener
        // buffered each envelope whole (peak RSS +240 MB), and the budget they held could close
        // the key holder's connection, losing messages whose send had returned true.
        let control = try ChildProcess.run("port-auth-flood", ["control", "8"])
        XCTAssertEqual(control.status, 0, control.standardError)
        let attack = try ChildProcess.run("port-auth-flood", ["attack", "8"])
        XCTAssertEqual(attack.status, 0, attack.standardError)
        let c = fields(control.standardOutput)
        let a = fields(attack.standardOutput)
        for (name, f, output) in [("control", c, control.standardOutput), ("attack", a, attack.standardOutput)] {
            XCTAssertEqual(f["delivered"], f["sent-true"], "\(name): a send returned true and its message was lost: \(output)")
            XCTAssertEqual(f["sent-true"], "8", "\(name): \(output)")
        }
        XCTAssertEqual(a["refused"], "6", attack.standardOutput)
        XCTAssertEqual(
            a["attackers-cut-off"], "6", "every keyless connection was closed before its frame was sent: \(attack.standardOutput)")
        // Closed on the first read (the attacker's kernel buffers take a few MiB at most).
        XCTAssertLessThan(Int(a["attacker-max-kb"] ?? "") ?? .max, 32 << 10, attack.standardOutput)
        XCTAssertEqual(
            attack.standardOutput.components(separatedBy: "first segment (at most 2071 bytes").count - 1, 4, attack.standardOutput)
        XCTAssertEqual(attack.standardOutput.components(separatedBy: "does not match").count - 1, 2, attack.standardOutput)
        // The bound: 16 MiB over the control, for 360 MiB of keyless frames (each connection
        // may cost one 64 KiB read; the rest is noise between two processes).
        let growth = (Int(a["maxrss-kb"] ?? "") ?? .max) - (Int(c["maxrss-kb"] ?? "") ?? 0)
        XCTAssertLessThan(
            growth, 16 << 10, "peak RSS over the control (kB): control \(control.standardOutput) attack \(attack.standardOutput)")
    }

    func testAWrongKeyCostsOneSmallVerificationPerConnection() throws {
        let hook = TokenHook("good")
        let listener = Listener(try TKSocketPort(tcpPort: 0))
        defer { listener.finish() }
        listener.port.authenticator = hook.authenticator
        let number = try XCTUnwrap(listener.port.localPort)

        // A 4 MiB message signed with another token: only its first segment is verified.
        let stranger = try TKSocketPort(remoteHost: "127.0.0.1", port: number)
        defer { stranger.invalidate() }
        stranger.authenticator = TokenHook("evil").authenticator
        let sender = TKThread { _ = sendMessage(stranger, 1, [UInt8](repeating: 1, count: 4 << 20), before: .now + .seconds(5)) }
        sender.start()
        XCTAssertEqual(listener.refused.wait(timeout: .now() + 30), .success, "no refusal")
        sender.join()
        XCTAssertEqual(hook.calls, 1, "verifications for one keyless connection")
        XCTAssertLessThanOrEqual(hook.largest, PortWireFormat.firstSegmentLimit, "bytes verified")
        XCTAssertTrue(listener.refusals.withLock { $0.last ?? "" }.contains("does not match"), "\(listener.refusals.withLock { $0 })")

        // Wire version 1's envelope announcing 60 MiB: refused from its length, nothing verified.
        let fd = RawClient.connect(tcpPort: number)
        defer { close(fd) }
        let head: [UInt8] = [0x03, 0xC0, 0x00, 0x00] + Array("TKPATKPM".utf8) + [1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0]
        RawClient.write(fd, head + [UInt8](repeating: 0, count: 256 << 10))
        XCTAssertEqual(listener.refused.wait(timeout: .now() + 30), .success, "envelope: no refusal")
        XCTAssertTrue(listener.refusals.withLock { $0.last ?? "" }.contains("first segment"), "\(listener.refusals.withLock { $0 })")
        XCTAssertEqual(hook.calls, 1)
        XCTAssertEqual(listener.collector.count, 0)

        // The key holder still gets through, with a message of many segments.
        let holder = try TKSocketPort(remoteHost: "127.0.0.1", port: number)
        defer { holder.invalidate() }
        holder.authenticator = hook.authenticator
        let data = (0..<(300 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        XCTAssertTrue(sendMessage(holder, 2, data))
        XCTAssertTrue(listener.waitForMessages(1))
        XCTAssertEqual(listener.collector.ids, [2])
        XCTAssertEqual(listener.collector.received.withLock { $0.first?.data }, data)
        XCTAssertTrue(
            waitUntil(.now + .seconds(30)) { TKSocketPort.unfinishedFrameBytes == 0 },
            "\(TKSocketPort.unfinishedFrameBytes) bytes still held")
    }

    func testAVerifyingDecoderHoldsOnlyWhatWasVerifiedAndRefusesSplicedSegments() throws {
        let key = try TKSocketPortAuthenticator.sharedKey(Array("a shared secret of 32 bytes!!!!!".utf8))
        func message(_ msgid: UInt32, _ size: Int, _ authenticator: TKSocketPortAuthenticator) throws -> [UInt8] {
            try PortWireFormat.encode(
                .init(msgid: msgid, reply: nil, components: [.data([UInt8](repeating: UInt8(msgid), count: size))]),
                sign: authenticator.sign
            ).get()
        }
        // Forged segments (another signer) of a 4 MiB message, fed a read at a time: refused at
        // the first, having held one read.
        let forged = try PortWireFormat.encode(
            .init(msgid: 1, reply: nil, components: [.data([UInt8](repeating: 1, count: 4 << 20))]),
            sign: { _ in [UInt8](repeating: 0xEE, count: 32) }
        ).get()
        var decoder = PortWireFormat.Decoder()
        var offset = 0
        var outcome: Result<PortWireFormat.Frame?, PortWireFormat.FrameError> = .success(nil)
        while offset < forged.count, case .success(nil) = outcome {
            let end = min(offset + (64 << 10), forged.count)
            forged[offset..<end].withUnsafeBytes { decoder.append($0) }
            offset = end
            XCTAssertLessThanOrEqual(decoder.heldByteCount, 64 << 10 + 4096, "held before anything verified")
            outcome = decoder.next(verifier: key.verify)
        }
        guard case .failure(.unauthenticated(let why)) = outcome else { return XCTFail("forged segments were taken: \(outcome)") }
        XCTAssertTrue(why.contains("does not match"), why)
        XCTAssertEqual(offset, 64 << 10, "refused on the first read")

        // A key holder's message in many segments, across reads of odd sizes.
        let good = try message(2, 200 << 10, key)
        decoder = PortWireFormat.Decoder()
        var frames: [PortWireFormat.Frame] = []
        offset = 0
        while offset < good.count {
            let end = min(offset + 7_919, good.count)
            good[offset..<end].withUnsafeBytes { decoder.append($0) }
            offset = end
            while case .success(let frame?) = decoder.next(verifier: key.verify) { frames.append(frame) }
        }
        XCTAssertEqual(frames.map(\.msgid), [2])
        XCTAssertEqual(frames.first?.components, [.data([UInt8](repeating: 2, count: 200 << 10))])
        XCTAssertEqual(decoder.heldByteCount, 0)
        XCTAssertFalse(decoder.isAssembling)

        // Segments of two signed messages spliced: refused, whatever each MAC says.
        let a = try message(3, 200 << 10, key)
        let b = try message(4, 200 << 10, key)
        let firstLength = 4 + PortWireFormat.segmentHeaderLength + PortWireFormat.firstSegmentData + 32 + 2
        let secondLength = 4 + PortWireFormat.segmentHeaderLength + PortWireFormat.segmentData + 32 + 2
        let spliced = Array(a[0..<firstLength]) + Array(b[firstLength..<firstLength + secondLength])
        decoder = PortWireFormat.Decoder()
        spliced.withUnsafeBytes { decoder.append($0) }
        guard case .failure(.malformed(let order)) = decoder.next(verifier: key.verify) else {
            return XCTFail("spliced segments were taken")
        }
        XCTAssertTrue(order.contains("was due"), order)

        // Wire version 1's envelope is refused with a reason, with or without a verifier.
        let old = [0, 0, 0, 8] + Array("TKPATKPM".utf8)
        for verifier in [nil, key.verify] as [PortWireFormat.Verifier?] {
            decoder = PortWireFormat.Decoder()
            old.withUnsafeBytes { decoder.append($0) }
            guard case .failure(let error) = decoder.next(verifier: verifier) else { return XCTFail("an old envelope was taken") }
            XCTAssertTrue(error.description.contains("version 1"), error.description)
        }
    }

    // MARK: Key holders wait for the budget; nothing sent is dropped

    func testAKeyHoldersMessageWaitsForTheBudgetInsteadOfBeingDropped() throws {
        try withBudget(3 << 20) {
            let hook = TokenHook("token")
            let listener = Listener(try TKSocketPort(tcpPort: 0))
            defer { listener.finish() }
            listener.port.authenticator = hook.authenticator
            let number = try XCTUnwrap(listener.port.localPort)

            // A key holder sends half of a 2 MiB message and stops: admitted, it holds 2.25 MiB.
            let first = try PortWireFormat.encode(
                .init(msgid: 1, reply: nil, components: [.data([UInt8](repeating: 1, count: 2 << 20))]),
                sign: hook.authenticator.sign
            ).get()
            let staller = RawClient.connect(tcpPort: number)
            defer { close(staller) }
            RawClient.write(staller, Array(first[0..<(1 << 20)]))
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) { TKSocketPort.unfinishedFrameBytes >= 2 << 20 }, "the first message was not admitted")

            // Another key holder's 2 MiB message does not fit beside it: its connection waits.
            let waitsBefore = UnfinishedFrameBudget.waits
            let holder = try TKSocketPort(remoteHost: "127.0.0.1", port: number)
            defer { holder.invalidate() }
            holder.authenticator = hook.authenticator
            let sent = Atomic<Int>(0)
            let sender = TKThread {
                if sendMessage(holder, 2, [UInt8](repeating: 2, count: 2 << 20), before: .now + .seconds(60)) {
                    sent.store(1, ordering: .releasing)
                }
            }
            sender.start()
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) { UnfinishedFrameBudget.waits > waitsBefore }, "the second connection never waited")
            XCTAssertLessThanOrEqual(TKSocketPort.unfinishedFrameBytes, 3 << 20, "over the budget")
            XCTAssertEqual(listener.collector.count, 0)
            XCTAssertEqual(listener.refusals.withLock { $0 }, [], "a connection was closed instead of waiting")

            // The first message completes; the waiting one is admitted and arrives too.
            RawClient.write(staller, Array(first[(1 << 20)...]))
            XCTAssertTrue(listener.waitForMessages(2), "received \(listener.collector.ids)")
            sender.join()
            XCTAssertEqual(sent.load(ordering: .acquiring), 1)
            XCTAssertEqual(listener.collector.ids, [1, 2])
            XCTAssertEqual(listener.collector.received.withLock { $0.map(\.data.count) }, [2 << 20, 2 << 20])
            XCTAssertEqual(listener.refusals.withLock { $0 }, [])
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) { TKSocketPort.unfinishedFrameBytes == 0 },
                "\(TKSocketPort.unfinishedFrameBytes) bytes still held")
        }
    }

    func testKeyHoldersSendingMoreThanTheBudgetAtOnceLoseNothing() throws {
        try withBudget(3 << 20) {
            let hook = TokenHook("token")
            let listener = Listener(try TKSocketPort(tcpPort: 0))
            defer { listener.finish() }
            listener.port.authenticator = hook.authenticator
            let number = try XCTUnwrap(listener.port.localPort)
            // Two senders, 6 messages of 2 MiB each, beside a stalled third: two at once need 4.5 MiB.
            let perSender = 6
            let sentTrue = Atomic<Int>(0)
            var senders: [TKThread] = []
            var remotes: [TKSocketPort] = []
            for s in 0..<2 {
                let remote = try TKSocketPort(remoteHost: "127.0.0.1", port: number)
                remote.authenticator = hook.authenticator
                remotes.append(remote)
                let sender = TKThread {
                    for i in 0..<perSender
                    where sendMessage(
                        remote, UInt32(s * 100 + i), [UInt8](repeating: UInt8(s), count: 2 << 20), before: .now + .seconds(60))
                    {
                        sentTrue.wrappingAdd(1, ordering: .relaxed)
                    }
                }
                senders.append(sender)
            }
            defer { for remote in remotes { remote.invalidate() } }
            // A third key holder sends half of a 2 MiB message first and stalls, so the senders
            // start against a budget that cannot take another message beside it: they overlap
            // with it by construction, whatever the scheduler does.
            let stalled = try PortWireFormat.encode(
                .init(msgid: 900, reply: nil, components: [.data([UInt8](repeating: 9, count: 2 << 20))]),
                sign: hook.authenticator.sign
            ).get()
            let staller = RawClient.connect(tcpPort: number)
            defer { close(staller) }
            RawClient.write(staller, Array(stalled[0..<(1 << 20)]))
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) { TKSocketPort.unfinishedFrameBytes >= 2 << 20 }, "the stalled message was not admitted")
            let waitsBefore = UnfinishedFrameBudget.waits
            for sender in senders { sender.start() }
            var maxHeld = 0
            XCTAssertTrue(
                waitUntil(.now + .seconds(30)) {
                    maxHeld = max(maxHeld, TKSocketPort.unfinishedFrameBytes)
                    return UnfinishedFrameBudget.waits > waitsBefore
                }, "no sender waited for the budget")
            RawClient.write(staller, Array(stalled[(1 << 20)...]))
            let arrived = waitUntil(.now + .seconds(60)) {
                maxHeld = max(maxHeld, TKSocketPort.unfinishedFrameBytes)
                return listener.collector.count >= 2 * perSender + 1
            }
            for sender in senders { sender.join() }
            XCTAssertTrue(arrived, "received \(listener.collector.count) of \(2 * perSender + 1)")
            XCTAssertEqual(sentTrue.load(ordering: .relaxed), 2 * perSender)
            XCTAssertEqual(listener.collector.count, 2 * perSender + 1)
            let ids = listener.collector.ids
            XCTAssertEqual(ids.filter { $0 == 900 }, [900], "the stalled message arrived once")
            for s in 0..<2 {
                XCTAssertEqual(ids.filter { $0 / 100 == UInt32(s) }, (0..<perSender).map { UInt32(s * 100 + $0) }, "sender \(s) in order")
            }
            XCTAssertEqual(listener.refusals.withLock { $0 }, [], "a connection was closed instead of waiting")
            XCTAssertLessThanOrEqual(maxHeld, (3 << 20) + (64 << 10), "held over the budget (beyond malloc's rounding)")
        }
    }

    func testAMessageBiggerThanTheWholeBudgetIsRefusedNotWaitedOnForever() throws {
        try withBudget(1 << 20) {
            let hook = TokenHook("token")
            let listener = Listener(try TKSocketPort(tcpPort: 0))
            defer { listener.finish() }
            listener.port.authenticator = hook.authenticator
            let holder = try TKSocketPort(remoteHost: "127.0.0.1", port: try XCTUnwrap(listener.port.localPort))
            defer { holder.invalidate() }
            holder.authenticator = hook.authenticator
            _ = sendMessage(holder, 1, [UInt8](repeating: 1, count: 2 << 20), before: .now + .seconds(5))
            XCTAssertEqual(listener.refused.wait(timeout: .now() + 30), .success, "no refusal")
            let reason = listener.refusals.withLock { $0.first ?? "" }
            XCTAssertTrue(reason.contains("more than all of it") && reason.contains("Fix:"), reason)
            // A message that fits still arrives on a new connection.
            XCTAssertTrue(sendMessage(holder, 2, [1, 2, 3]))
            XCTAssertTrue(listener.waitForMessages(1))
            XCTAssertEqual(listener.collector.ids, [2])
        }
    }
}
