// TKDispatchData (issue 14, "Dispatch surface"), after libdispatch's dispatch_data test program:
// concatenation and subranges share the original bytes (judged by comparing region addresses
// with the buffers the test allocated), the bytes read back equal a plain array built alongside,
// a deallocator runs exactly once when the last value using its bytes is gone (on its queue when
// given one), regions and region(location:) describe the layout.
import Dispatch
import Foundation
import Testing
import ThreadKit
import XCTest

final class DispatchDataTests: XCTestCase {
    /// A malloc'd buffer of `count` bytes starting at `first`, owned by the returned data.
    private func mallocData(_ count: Int, first: UInt8, freed: DispatchSemaphore? = nil) -> (TKDispatchData, UnsafeRawPointer) {
        let memory = malloc(count)!.bindMemory(to: UInt8.self, capacity: count)
        for i in 0..<count { memory[i] = first &+ UInt8(truncatingIfNeeded: i) }
        let raw = UnsafeRawBufferPointer(start: memory, count: count)
        let data: TKDispatchData
        if let freed {
            let address = UInt(bitPattern: memory)
            data = TKDispatchData(
                bytesNoCopy: raw,
                deallocator: .custom(nil) {
                    free(UnsafeMutableRawPointer(bitPattern: address))
                    freed.signal()
                })
        } else {
            data = TKDispatchData(bytesNoCopy: raw, deallocator: .free)
        }
        return (data, UnsafeRawPointer(memory))
    }

    private func baseAddresses(_ data: TKDispatchData) -> [UnsafeRawPointer] {
        var bases: [UnsafeRawPointer] = []
        data.enumerateBytes { buffer, _, _ in bases.append(UnsafeRawPointer(buffer.baseAddress!)) }
        return bases
    }

    func testConcatenationSharesTheBytesOfBothParts() {
        let (a, aBase) = mallocData(100, first: 0)
        let (b, bBase) = mallocData(50, first: 200)
        var joined = a
        joined.append(b)
        XCTAssertEqual(joined.count, 150)
        XCTAssertEqual(joined.regions.count, 2)
        XCTAssertEqual(baseAddresses(joined), [aBase, bBase], "bytes were copied")
        XCTAssertEqual(Array(joined), Array(a) + Array(b))
        XCTAssertEqual(a.count, 100, "appending changed the original value")
    }

    func testASubrangeAcrossRegionsSharesTheBytesAndReadsBackRight() {
        let (a, aBase) = mallocData(100, first: 0)
        let (b, bBase) = mallocData(100, first: 100)
        var joined = a
        joined.append(b)
        let middle = joined.subdata(in: 90..<130)
        XCTAssertEqual(middle.count, 40)
        XCTAssertEqual(baseAddresses(middle), [aBase + 90, bBase])
        XCTAssertEqual(Array(middle), (90..<130).map { UInt8($0) })
        XCTAssertEqual(middle[0], 90)
        XCTAssertEqual(middle[39], 129)
        let region = joined.region(location: 150)
        XCTAssertEqual(region.offset, 100)
        XCTAssertEqual(region.data.count, 100)
        XCTAssertEqual(joined.subdata(in: 5..<5).count, 0)
    }

    func testTheDeallocatorRunsOnceWhenTheLastValueUsingTheBytesIsGone() {
        let freed = DispatchSemaphore(value: 0)
        var pieces: [TKDispatchData] = []
        do {
            let (a, _) = mallocData(64, first: 1, freed: freed)
            var joined = TKDispatchData(copying: [9, 9])
            joined.append(a)
            pieces = [joined.subdata(in: 10..<20), a.subdata(in: 0..<1)]
        }
        XCTAssertEqual(freed.wait(timeout: .now()), .timedOut, "freed while subranges still use the bytes")
        XCTAssertEqual(Array(pieces[0]), (8..<18).map { UInt8(1 + $0) })
        pieces.removeFirst()
        XCTAssertEqual(freed.wait(timeout: .now()), .timedOut, "freed while a subrange still uses the bytes")
        pieces.removeAll()
        XCTAssertEqual(freed.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(freed.wait(timeout: .now() + .milliseconds(20)), .timedOut, "the deallocator ran twice")
    }

    func testACustomDeallocatorWithAQueueRunsOnThatQueue() {
        let queue = TKDispatchQueue(label: "releaser")
        let key = TKDispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 3)
        let ran = DispatchSemaphore(value: 0)
        let seen = Guarded<Int?>(nil)
        do {
            let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: 8, alignment: 8)
            let address = UInt(bitPattern: storage.baseAddress)
            _ = TKDispatchData(
                bytesNoCopy: UnsafeRawBufferPointer(storage),
                deallocator: .custom(queue) {
                    seen.withLock { $0 = TKDispatchQueue.getSpecific(key: key) }
                    UnsafeMutableRawPointer(bitPattern: address)?.deallocate()
                    ran.signal()
                })
        }
        XCTAssertEqual(ran.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(seen.withLock { $0 }, 3)
    }

    func testEmptyDataAndCopies() {
        XCTAssertEqual(TKDispatchData.empty.count, 0)
        XCTAssertTrue(TKDispatchData.empty.regions.isEmpty)
        var data = TKDispatchData.empty
        data.append(TKDispatchData.empty)
        XCTAssertEqual(data.count, 0)
        let bytes: [UInt8] = [1, 2, 3]
        let copy = bytes.withUnsafeBytes { TKDispatchData(bytes: $0) }
        XCTAssertEqual(Array(copy), bytes)
        XCTAssertEqual(copy.withUnsafeBytes { Array($0) }, bytes)
    }

    func testContiguousAccessEnumerationAndCopyingOfManyRegions() {
        var data = TKDispatchData()
        var expected: [UInt8] = []
        for i in 0..<20 {
            let piece = (0..<(i + 1)).map { UInt8(truncatingIfNeeded: $0 * 3 + i) }
            expected += piece
            data.append(TKDispatchData(copying: piece))
        }
        XCTAssertEqual(data.regions.count, 20)
        XCTAssertEqual(data.withUnsafeBytes { Array($0) }, expected)
        var visited = 0
        data.enumerateBytes { buffer, index, stop in
            XCTAssertEqual(Array(buffer), Array(expected[index..<index + buffer.count]))
            visited += 1
            if visited == 5 { stop = true }
        }
        XCTAssertEqual(visited, 5)
        var target = [UInt8](repeating: 0, count: 30)
        let copied = target.withUnsafeMutableBytes { data.copyBytes(to: $0, from: 100..<200) }
        XCTAssertEqual(copied, 30)
        XCTAssertEqual(target, Array(expected[100..<130]))
        for i in stride(from: 0, to: expected.count, by: 7) { XCTAssertEqual(data[i], expected[i]) }
    }
}

/// Misuse of TKDispatchData, an exit test (Support/MisuseAssertions.swift).
@Suite struct DispatchDataExitTests {
    @Test func aSubrangeOutsideTheDataStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = TKDispatchData(copying: [UInt8](repeating: 1, count: 10)).subdata(in: 5..<20)
        }
        expectMisuse(result, mentions: ["TKDispatchData.subdata(in: 5..<20)", "10 bytes", "Fix:"])
    }
}
