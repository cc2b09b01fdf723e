// TKDispatchIO and TKDispatchData at the edges of their integer ranges (issue: "TKDispatchIO traps
// on a huge offset"). A random-access channel adds each offset to the position the descriptor had
// when it opened; an offset near Int64.max on a descriptor not at 0 made that sum trap. The
// child `dispatch-io-offsets` runs reads and writes at extreme offsets and lengths on
// TKDispatchIO (in a process of its own: a trap kills only it); this test runs the very same
// cases on libdispatch's DispatchIO here and requires the same outcome for each — the bytes read,
// the final errno (EINVAL where the position is out of range), the bytes a write handed back, the
// descriptor's position and the file's bytes. TKDispatchData's ranges and sizes at Int's edges
// must stop with ThreadKit's misuse message, never a bare arithmetic trap (exit tests).
import Dispatch
import Foundation
import Testing
import ThreadKit
import XCTest

final class DispatchIOOffsetTests: XCTestCase {
    func testExtremeOffsetsAndLengthsEndAsInLibdispatch() throws {
        let result = try ChildProcess.run("dispatch-io-offsets", timeout: .seconds(120))
        XCTAssertFalse(result.signalled, "the child crashed: \(result.standardError)")
        XCTAssertEqual(result.status, 0, result.standardOutput + result.standardError)
        let lines = result.standardOutput.split(separator: "\n").filter { $0.hasPrefix("case ") }
        XCTAssertGreaterThanOrEqual(lines.count, 40, result.standardOutput)
        var sawEINVAL = 0
        for line in lines {
            let halves = line.components(separatedBy: " => ")
            guard halves.count == 2, let c = Case(halves[0]) else { return XCTFail("unreadable line: \(line)") }
            let expected = libdispatchOutcome(c)
            XCTAssertEqual(halves[1], expected, "\(halves[0]): ThreadKit ≠ libdispatch")
            if halves[1].contains("err=\(EINVAL) ") { sawEINVAL += 1 }
        }
        // The cases that used to trap are among those answered with EINVAL.
        let trapping = lines.first { $0.hasPrefix("case random read off=\(Int64.max - 5) len=4 pos=10 =>") }
        XCTAssertTrue(
            trapping?.hasSuffix("bytes= err=\(EINVAL) left=0 position=10 file=0123456789abcdefghij") == true,
            String(trapping ?? "missing"))
        let trappingWrite = lines.first { $0.hasPrefix("case random write off=\(Int64.max - 5) len=2 pos=10 =>") }
        XCTAssertTrue(
            trappingWrite?.hasSuffix("bytes= err=\(EINVAL) left=2 position=10 file=0123456789abcdefghij") == true,
            String(trappingWrite ?? "missing"))
        XCTAssertGreaterThan(sawEINVAL, 10)
    }

    // MARK: libdispatch, the reference

    /// One line's parameters: `case TYPE OP off=OFF len=LEN pos=POS`.
    private struct Case {
        let random: Bool, read: Bool, off: Int64, len: Int, pos: Int64
        init?(_ text: String) {
            let words = text.split(separator: " ")
            guard words.count == 6, words[0] == "case" else { return nil }
            func value(_ word: Substring, _ key: String) -> Substring? {
                word.hasPrefix(key + "=") ? word.dropFirst(key.count + 1) : nil
            }
            guard let off = value(words[3], "off").flatMap({ Int64($0) }),
                let len = value(words[4], "len").flatMap({ Int($0) }),
                let pos = value(words[5], "pos").flatMap({ Int64($0) })
            else { return nil }
            random = words[1] == "random"
            read = words[2] == "read"
            self.off = off
            self.len = len
            self.pos = pos
        }
    }

    private final class Collected: @unchecked Sendable {
        // Written by handlers on one serial queue; read after `done` was signalled.
        var bytes: [UInt8] = []
        var error: Int32 = -1
        var left = 0
    }

    /// The child's format for the same case run on libdispatch.
    private func libdispatchOutcome(_ c: Case) -> String {
        let path = NSTemporaryDirectory() + "tk-io-offsets-\(UUID().uuidString)"
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { return "open failed: errno \(errno)" }
        unlink(path)
        defer { close(fd) }
        let content = Array("0123456789abcdefghij".utf8)
        _ = content.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        lseek(fd, off_t(c.pos), SEEK_SET)
        let queue = DispatchQueue(label: "io-offsets")
        let done = DispatchSemaphore(value: 0)
        let cleaned = DispatchSemaphore(value: 0)
        let io = DispatchIO(type: c.random ? .random : .stream, fileDescriptor: fd, queue: queue) { _ in cleaned.signal() }
        let collected = Collected()
        let handler: @Sendable (Bool, DispatchData?, Int32) -> Void = { isDone, data, error in
            if let data { if c.read { collected.bytes += Array(data) } else { collected.left = data.count } }
            if isDone {
                collected.error = error
                done.signal()
            }
        }
        if c.read {
            io.read(offset: off_t(c.off), length: c.len, queue: queue, ioHandler: handler)
        } else {
            let data = Array("XY".utf8).withUnsafeBytes { DispatchData(bytes: $0) }
            io.write(offset: off_t(c.off), data: data, queue: queue, ioHandler: handler)
        }
        guard done.wait(timeout: .now() + 30) == .success else { return "TIMEOUT" }
        io.close()
        guard cleaned.wait(timeout: .now() + 30) == .success else { return "TIMEOUT" }
        let position = lseek(fd, 0, SEEK_CUR)
        var file = [UInt8](repeating: 0, count: 64)
        let n = pread(fd, &file, file.count, 0)
        return "bytes=\(String(decoding: collected.bytes, as: UTF8.self)) err=\(collected.error) left=\(collected.left) "
            + "position=\(position) file=\(String(decoding: file.prefix(max(n, 0)), as: UTF8.self))"
    }
}

/// TKDispatchData's ranges and sizes at Int's edges, each an exit test: ThreadKit's misuse
/// message, never a bare arithmetic trap (Support/MisuseAssertions.swift).
@Suite struct DispatchIOOffsetExitTests {
    @Test(arguments: DispatchDataExtreme.allCases)
    func dispatchDataRangesAndSizesAtIntsEdgesStopWithAMessage(_ extreme: DispatchDataExtreme) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [extreme] in
            extreme.run()
        }
        expectMisuse(result, mentions: [extreme.message, "Fix:"])
    }
}

/// One TKDispatchData call with a range or size at the edge of Int. `hugeAppend` appends to a
/// data claiming Int.max bytes (a region over memory never read: the count overflows).
enum DispatchDataExtreme: String, CaseIterable, Codable, Sendable {
    case subdataFullIntRange, subdataAtIntMax, subdataFromIntMin, regionIntMin, regionIntMax, subscriptIntMin
    case copyBytesNearIntMax, hugeAppend

    /// What the misuse message must say.
    var message: String {
        switch self {
        case .subdataFullIntRange: "TKDispatchData.subdata(in: \(Int.min)..<\(Int.max))"
        case .subdataAtIntMax: "TKDispatchData.subdata(in: \(Int.max)..<\(Int.max))"
        case .subdataFromIntMin: "outside the data's 10 bytes"
        case .regionIntMin: "TKDispatchData.region(location: \(Int.min))"
        case .regionIntMax: "TKDispatchData.region(location: \(Int.max))"
        case .subscriptIntMin: "TKDispatchData[\(Int.min)]"
        case .copyBytesNearIntMax: "TKDispatchData.subdata(in: \(Int.max - 1)..<\(Int.max))"
        case .hugeAppend: "TKDispatchData.append: the data would hold \(Int.max) + 10 bytes, more than Int.max"
        }
    }

    /// The call: a misuse, so it stops the process.
    func run() {
        let ten = TKDispatchData(copying: [UInt8](repeating: 7, count: 10))
        var target = [UInt8](repeating: 0, count: 4)
        switch self {
        case .subdataFullIntRange: _ = ten.subdata(in: Int.min..<Int.max)
        case .subdataAtIntMax: _ = ten.subdata(in: Int.max..<Int.max)
        case .subdataFromIntMin: _ = ten.subdata(in: Int.min..<5)
        case .regionIntMin: _ = ten.region(location: Int.min)
        case .regionIntMax: _ = ten.region(location: Int.max)
        case .subscriptIntMin: _ = ten[Int.min]
        case .copyBytesNearIntMax: _ = target.withUnsafeMutableBytes { ten.copyBytes(to: $0, from: (Int.max - 1)..<Int.max) }
        case .hugeAppend:
            var byte: UInt8 = 1
            withUnsafeMutablePointer(to: &byte) { pointer in
                // safety: the bytes are never read — only counted — and the no-op deallocator
                // leaves them alone.
                let claimed = UnsafeRawBufferPointer(start: UnsafeRawPointer(pointer), count: Int.max)
                var huge = TKDispatchData(bytesNoCopy: claimed, deallocator: .custom(nil) {})
                huge.append(ten)
            }
        }
    }
}
