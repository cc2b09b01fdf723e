// TKAtomic: OSAtomic's values (Listing 4-1 and the seed examples), new-value returns, bit
// numbering, wrap-around, exact totals under contention, and litmus tests for the orderings that
// `barrier: true` promises (forbidden outcomes counted and required to be zero).
import Foundation
import Synchronization
import Testing
import ThreadKit
import XCTest

final class AtomicTests: XCTestCase {
    // MARK: The documented values

    func testListing4_1() {
        let theValue = TKAtomicInt32(0)
        XCTAssertFalse(theValue.testAndSet(bit: 0))
        XCTAssertEqual(theValue.load(), 128)
        theValue.store(0)
        XCTAssertFalse(theValue.testAndSet(bit: 7))
        XCTAssertEqual(theValue.load(), 1)
        theValue.store(0)
        XCTAssertFalse(theValue.testAndSet(bit: 15))
        XCTAssertEqual(theValue.load(), 256)
        XCTAssertTrue(theValue.compareAndSwap(expected: 256, desired: 512))
        XCTAssertEqual(theValue.load(), 512)
        XCTAssertFalse(theValue.compareAndSwap(expected: 256, desired: 1024))
        XCTAssertEqual(theValue.load(), 512)
    }

    func testSeedAddTwiceFromTen() {
        let num = TKAtomicInt64(10)
        XCTAssertEqual(num.add(20, barrier: false), 30)
        XCTAssertEqual(num.add(20), 50)
        XCTAssertEqual(num.load(), 50)
    }

    func testSeedIncrementAndDecrementTwiceFromTen() {
        let up = TKAtomicInt64(10)
        XCTAssertEqual(up.increment(barrier: false), 11)
        XCTAssertEqual(up.increment(), 12)
        let down = TKAtomicInt64(10)
        XCTAssertEqual(down.decrement(barrier: false), 9)
        XCTAssertEqual(down.decrement(), 8)
    }

    func testSeedCompareAndSwap() {
        let matching = TKAtomicInt64(10)
        XCTAssertTrue(matching.compareAndSwap(expected: 10, desired: 20))
        XCTAssertEqual(matching.load(), 20)
        let stale = TKAtomicInt64(10)
        XCTAssertFalse(stale.compareAndSwap(expected: 11, desired: 20))
        XCTAssertEqual(stale.load(), 10)
        XCTAssertTrue(stale.compareAndSwap(expected: 10, desired: 20, barrier: false))
        XCTAssertFalse(stale.compareAndSwap(expected: 10, desired: 30, barrier: false))
        XCTAssertEqual(stale.load(), 20)
    }

    // MARK: Return values, bits, wrap-around

    func testOperationsReturnTheNewValueInt32() { checkNewValueReturns(Int32.self) }
    func testOperationsReturnTheNewValueInt64() { checkNewValueReturns(Int64.self) }
    func testOperationsReturnTheNewValueUInt32() { checkNewValueReturns(UInt32.self) }
    func testOperationsReturnTheNewValueUInt64() { checkNewValueReturns(UInt64.self) }
    func testOperationsReturnTheNewValuePointerSized() {
        checkNewValueReturns(Int.self)
        checkNewValueReturns(UInt.self)
    }

    func testUnsignedAndPointerSizedValuesKeepTheirWholeRange() {
        XCTAssertEqual(TKAtomicUInt64(0).decrement(), .max)
        XCTAssertEqual(TKAtomicUInt64(.max).add(2, barrier: false), 1)
        let big = TKAtomicUInt64(1 << 63)
        XCTAssertEqual(big.load(), 1 << 63, "above Int64.max")
        XCTAssertTrue(big.compareAndSwap(expected: 1 << 63, desired: .max))
        XCTAssertEqual(big.or(0), .max)
        XCTAssertEqual(TKAtomicInt(.max).increment(), .min)
        XCTAssertEqual(TKAtomicUInt(0).decrement(barrier: false), .max)
        XCTAssertEqual(Int.bitWidth, MemoryLayout<UnsafeRawPointer>.size * 8, "pointer-sized")
        let wide = TKAtomicUInt64(0)
        XCTAssertFalse(wide.testAndSet(bit: 63))
        XCTAssertEqual(wide.load(), 0x0100_0000_0000_0000)
        XCTAssertTrue(wide.testAndClear(bit: 63, barrier: false))
    }

    // MARK: Pointers (OSAtomicCompareAndSwapPtr)

    func testPointerCompareAndSwap() {
        let a = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        let b = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        defer {
            a.deallocate()
            b.deallocate()
        }
        let slot = TKAtomicPointer<UnsafeMutablePointer<Int>>(nil)
        XCTAssertNil(slot.load())
        XCTAssertTrue(slot.compareAndSwap(expected: nil, desired: a))
        XCTAssertFalse(slot.compareAndSwap(expected: nil, desired: b), "stale expectation")
        XCTAssertEqual(slot.load(), a)
        XCTAssertTrue(slot.compareAndSwap(expected: a, desired: b, barrier: false))
        slot.store(nil)
        XCTAssertNil(slot.load())
        let raw = TKAtomicPointer<UnsafeMutableRawPointer>(UnsafeMutableRawPointer(a))
        XCTAssertTrue(raw.compareAndSwap(expected: UnsafeMutableRawPointer(a), desired: nil))
    }

    func testALockFreeStackOnPointerCASLosesNoPush() {
        // Treiber push only (no pops, so no ABA): every node pushed by every thread is on the list.
        struct Node {
            var next: UnsafeMutablePointer<Node>?
            let value: Int
        }
        let head = TKAtomicPointer<UnsafeMutablePointer<Node>>(nil)
        let threads = 4
        let perThread = stress(50_000)
        let workers = TestThread.spawn(threads, "push") { t in
            for i in 0..<perThread {
                let node = UnsafeMutablePointer<Node>.allocate(capacity: 1)
                node.initialize(to: Node(next: nil, value: t * perThread + i))
                repeat { node.pointee.next = head.load() } while !head.compareAndSwap(expected: node.pointee.next, desired: node)
            }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
        var seen = Set<Int>()
        var next = head.load()
        while let node = next {
            seen.insert(node.pointee.value)
            next = node.pointee.next
            node.deallocate()
        }
        XCTAssertEqual(seen.count, threads * perThread)
    }

    // MARK: Bits of a byte buffer of any length (OSAtomicTestAndSet on memory)

    func testBufferBitsFollowOSAtomicNumberingAndReturnTheOldBit() {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 5, alignment: 1) // odd length on purpose
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
        for (bit, byte, mask) in [(0, 0, 0x80), (7, 0, 0x01), (9, 1, 0x40), (33, 4, 0x40), (39, 4, 0x01)] as [(Int, Int, UInt8)] {
            XCTAssertFalse(TKAtomicTestAndSet(bit: bit, in: buffer))
            XCTAssertEqual(buffer[byte] & mask, mask, "bit \(bit) is \(mask) of byte \(byte)")
            XCTAssertTrue(TKAtomicTestAndSet(bit: bit, in: buffer, barrier: false), "already set")
        }
        XCTAssertEqual(Array(buffer), [0x81, 0x40, 0x00, 0x00, 0x41], "no other bit touched")
        XCTAssertTrue(TKAtomicTestAndClear(bit: 33, in: buffer.baseAddress!))
        XCTAssertFalse(TKAtomicTestAndClear(bit: 33, in: buffer, barrier: false))
        XCTAssertEqual(buffer[4], 0x01)
        // The same numbering as a TKAtomicUInt32's bits over the same four bytes (little-endian).
        let word = TKAtomicUInt32(0)
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
        for bit in [0, 5, 12, 31] {
            word.testAndSet(bit: bit)
            TKAtomicTestAndSet(bit: bit, in: buffer)
        }
        XCTAssertEqual(buffer.load(as: UInt32.self), word.load())
    }

    func testBufferBitsClaimedConcurrentlyGoToExactlyOneThreadEach() {
        // Four threads race to claim every bit of a 3-byte buffer: each bit's old value is false
        // for exactly one of them (judged by a mutex-protected count).
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 3, alignment: 1)
        defer { buffer.deallocate() }
        let base = UInt(bitPattern: buffer.baseAddress!)
        for _ in 0..<stress(2_000) {
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            let claimed = JudgedCounter()
            let workers = TestThread.spawn(4, "claim") { t in
                let memory = UnsafeMutableRawPointer(bitPattern: base)!
                for bit in 0..<24 where !TKAtomicTestAndSet(bit: (bit + t * 6) % 24, in: memory) { claimed.add() }
            }
            XCTAssertTrue(joinAll(workers))
            XCTAssertEqual(claimed.count, 24)
            XCTAssertEqual(Array(buffer), [0xFF, 0xFF, 0xFF])
        }
    }

    func testTestAndSetAndClearReturnTheOldBit() {
        let value = TKAtomicUInt32(0)
        XCTAssertFalse(value.testAndSet(bit: 3))
        XCTAssertEqual(value.load(), 0x10)
        XCTAssertTrue(value.testAndSet(bit: 3, barrier: false), "setting a set bit returns true")
        XCTAssertEqual(value.load(), 0x10)
        XCTAssertTrue(value.testAndClear(bit: 3))
        XCTAssertEqual(value.load(), 0)
        XCTAssertFalse(value.testAndClear(bit: 3, barrier: false), "clearing a clear bit returns false")
        value.store(0xFFFF_FFFF)
        XCTAssertTrue(value.testAndClear(bit: 8))
        XCTAssertEqual(value.load(), 0xFFFF_7FFF, "only the addressed bit is cleared")
    }

    func testBitNumberingFollowsOSAtomicTestAndSet() {
        // Bit n is 0x80 >> (n & 7) of byte n >> 3 (little-endian).
        let cases: [(bit: Int, value: UInt64)] = [
            (0, 0x80), (7, 0x01), (8, 0x8000), (15, 0x100), (23, 0x1_0000),
            (24, 0x8000_0000), (31, 0x0100_0000), (56, 0x8000_0000_0000_0000),
            (63, 0x0100_0000_0000_0000),
        ]
        for (bit, expected) in cases {
            let wide = TKAtomicInt64(0)
            wide.testAndSet(bit: bit)
            XCTAssertEqual(UInt64(bitPattern: wide.load()), expected, "Int64 bit \(bit)")
            if bit < 32 {
                let narrow = TKAtomicUInt32(0)
                narrow.testAndSet(bit: bit)
                XCTAssertEqual(UInt64(narrow.load()), expected, "UInt32 bit \(bit)")
            }
        }
    }

    func testArithmeticWrapsAround() {
        XCTAssertEqual(TKAtomicInt32(.max).increment(), .min)
        XCTAssertEqual(TKAtomicInt32(.min).decrement(barrier: false), .max)
        XCTAssertEqual(TKAtomicInt64(.max).add(1), .min)
        XCTAssertEqual(TKAtomicInt64(.min).decrement(), .max)
        XCTAssertEqual(TKAtomicUInt32(0).decrement(), .max)
        XCTAssertEqual(TKAtomicUInt32(.max).add(2, barrier: false), 1)
    }

    // MARK: Contention

    func testConcurrentIncrementsAreExact() {
        for threads in [2, 4] {
            let counter = TKAtomicInt64(0)
            let perThread = stress(1_000_000) / threads
            let workers = TestThread.spawn(threads, "inc") { _ in
                for _ in 0..<perThread { counter.increment() }
            }
            XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
            XCTAssertEqual(counter.load(), Int64(perThread * threads), "\(threads) threads lost increments")
        }
    }

    func testConcurrentRelaxedAddsAreStillAtomic() {
        let counter = TKAtomicUInt32(0)
        let perThread = stress(500_000)
        let workers = TestThread.spawn(2, "add") { _ in
            for _ in 0..<perThread { counter.add(3, barrier: false) }
        }
        XCTAssertTrue(joinAll(workers, until: .now + .seconds(120)))
        XCTAssertEqual(counter.load(), UInt32(truncatingIfNeeded: 6 * perThread))
    }

    // MARK: Litmus tests
    //
    // Two long-lived threads meet at a spin barrier before each iteration, so their operations
    // overlap. Shared values are not reset: iteration i (from 1) moves each of them to i, so a read
    // below i means the other thread's write of this iteration was not seen.

    func testMessagePassingThroughABarrierFlag() {
        // Data is written relaxed; the flag's barrier:true add must publish it (release/acquire).
        let data = TKAtomicInt64(0)
        let flag = TKAtomicInt64(0)
        let forbidden = Litmus.run(
            writer: { _ in
                data.add(1, barrier: false)
                flag.add(1, barrier: true)
                return (0, 0)
            },
            reader: { _ in
                let seenFlag = flag.load()
                return (Int(seenFlag), Int(data.load()))
            },
            isForbidden: { i, _, read in read.0 == i && read.1 < i }) // flag seen, data not
        XCTAssertEqual(forbidden, 0, "the reader saw the flag of an iteration but not its data")
    }

    func testStoreBufferingWithSequentiallyConsistentStores() {
        let x = TKAtomicInt64(0)
        let y = TKAtomicInt64(0)
        let forbidden = Litmus.run(
            writer: { i in
                x.store(Int64(i))
                return (Int(y.load()), 0)
            },
            reader: { i in
                y.store(Int64(i))
                return (Int(x.load()), 0)
            },
            isForbidden: { i, a, b in a.0 < i && b.0 < i }) // both missed the other's store
        XCTAssertEqual(forbidden, 0, "both threads read the old value (store buffering)")
    }

    func testStoreBufferingWithBarrierAdds() {
        let x = TKAtomicInt32(0)
        let y = TKAtomicInt32(0)
        let forbidden = Litmus.run(
            writer: { _ in
                x.add(1, barrier: true)
                return (Int(y.load()), 0)
            },
            reader: { _ in
                y.add(1, barrier: true)
                return (Int(x.load()), 0)
            },
            isForbidden: { i, a, b in a.0 < i && b.0 < i })
        XCTAssertEqual(forbidden, 0, "both threads read the old value (store buffering)")
    }

    func testStoreBufferingWithRelaxedAddsAndMemoryBarrier() {
        let x = TKAtomicUInt32(0)
        let y = TKAtomicUInt32(0)
        let forbidden = Litmus.run(
            writer: { _ in
                x.add(1, barrier: false)
                TKMemoryBarrier()
                return (Int(y.load()), 0)
            },
            reader: { _ in
                y.add(1, barrier: false)
                TKMemoryBarrier()
                return (Int(x.load()), 0)
            },
            isForbidden: { i, a, b in a.0 < i && b.0 < i })
        XCTAssertEqual(forbidden, 0, "both threads read the old value across TKMemoryBarrier")
    }

    func testLoadBuffering() {
        let x = TKAtomicInt64(0)
        let y = TKAtomicInt64(0)
        let forbidden = Litmus.run(
            writer: { i in
                let r = x.load()
                y.store(Int64(i))
                return (Int(r), 0)
            },
            reader: { i in
                let r = y.load()
                x.store(Int64(i))
                return (Int(r), 0)
            },
            isForbidden: { i, a, b in a.0 == i && b.0 == i }) // each read the other's later store
        XCTAssertEqual(forbidden, 0, "both loads saw the store that followed the other load")
    }

    // MARK: Helpers

    /// Checks add/increment/decrement/or/and/xor return the new value, with and without barrier.
    private func checkNewValueReturns<V: TKAtomicInteger>(_: V.Type, file: StaticString = #filePath, line: UInt = #line) {
        for barrier in [true, false] {
            let value = TKAtomic<V>(0b1100)
            XCTAssertEqual(value.or(0b0011, barrier: barrier), 0b1111, "\(V.self) or", file: file, line: line)
            XCTAssertEqual(value.and(0b1010, barrier: barrier), 0b1010, "\(V.self) and", file: file, line: line)
            XCTAssertEqual(value.xor(0b0110, barrier: barrier), 0b1100, "\(V.self) xor", file: file, line: line)
            XCTAssertEqual(value.add(5, barrier: barrier), 17, "\(V.self) add", file: file, line: line)
            XCTAssertEqual(value.increment(barrier: barrier), 18, "\(V.self) increment", file: file, line: line)
            XCTAssertEqual(value.decrement(barrier: barrier), 17, "\(V.self) decrement", file: file, line: line)
            XCTAssertEqual(value.load(), 17, "\(V.self) load", file: file, line: line)
        }
    }
}

/// Runs a two-thread litmus test and counts the iterations whose outcome is forbidden.
private enum Litmus {
    typealias Outcome = (Int, Int)

    /// `writer` and `reader` run iteration i (1...n) on their own threads, released together each
    /// time by a spin barrier; `isForbidden(i, writerOutcome, readerOutcome)` judges afterwards.
    static func run(
        iterations: Int = stress(1_000_000),
        writer: @escaping @Sendable (Int) -> Outcome,
        reader: @escaping @Sendable (Int) -> Outcome,
        isForbidden: (Int, Outcome, Outcome) -> Bool,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Int {
        let outcomes = Outcomes(iterations)
        let barrier = SpinBarrier(parties: 2)
        let threads = [writer, reader].enumerated().map { side, body in
            TestThread("litmus-\(side)") {
                for i in 1...iterations {
                    guard barrier.arriveAndWait() else { return }
                    outcomes.record(side, i, body(i))
                }
            }
        }
        // Written by each thread into its own slots; read after the joins, which publish them.
        XCTAssertTrue(joinAll(threads, until: .now + .seconds(300)), "litmus threads did not finish", file: file, line: line)
        return (1...iterations).count { isForbidden($0, outcomes[0, $0], outcomes[1, $0]) }
    }

    /// One slot per side and iteration; each side writes only its own slots.
    private final class Outcomes: @unchecked Sendable {
        private let slots: UnsafeMutableBufferPointer<Outcome>
        private let iterations: Int

        init(_ iterations: Int) {
            self.iterations = iterations
            slots = .allocate(capacity: 2 * iterations)
            slots.initialize(repeating: (0, 0))
        }
        deinit { slots.deallocate() }

        func record(_ side: Int, _ i: Int, _ outcome: Outcome) { slots[side * iterations + i - 1] = outcome }
        subscript(side: Int, i: Int) -> Outcome { slots[side * iterations + i - 1] }
    }
}

/// Misuses of the atomics, each an exit test (Support/MisuseAssertions.swift).
@Suite struct AtomicExitTests {
    @Test func aBufferBitOutsideTheBufferStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 3, alignment: 1)
            TKAtomicTestAndSet(bit: 24, in: buffer)
        }
        expectMisuse(result, mentions: ["TKAtomicTestAndSet(bit: 24, in: a 3-byte buffer)", "0..<24", "Fix:"])
    }
}
