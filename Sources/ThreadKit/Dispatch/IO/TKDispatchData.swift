// TKDispatchData: DispatchData (dispatch_data_t): an immutable run of bytes made of regions, each
// a slice of a buffer that is never written after it is wrapped. Concatenation and subranges
// share buffers (no bytes copied); a buffer's bytes are released — freed, unmapped or handed to a
// custom deallocator — when the last data value using it goes. Values are Sendable: nothing in
// them changes after construction (`append` builds a new region list on the caller's copy).
import Glibc

// safety: immutable: nobody writes the bytes once wrapped, and the deallocator runs once, in deinit.
/// A buffer of bytes no one writes once wrapped, and how to release it.
final class DataBuffer: @unchecked Sendable {
    let base: UnsafeRawPointer
    let count: Int
    let deallocator: TKDispatchData.Deallocator?

    /// `deallocator` nil: the bytes are not ours to release.
    init(base: UnsafeRawPointer, count: Int, deallocator: TKDispatchData.Deallocator?) {
        self.base = base
        self.count = count
        self.deallocator = deallocator
    }

    /// A malloc'd copy of `bytes`.
    convenience init(copying bytes: UnsafeRawBufferPointer) {
        let memory = malloc(max(bytes.count, 1))!
        if bytes.count > 0 { memcpy(memory, bytes.baseAddress!, bytes.count) }
        self.init(base: UnsafeRawPointer(memory), count: bytes.count, deallocator: .free)
    }

    deinit {
        switch deallocator {
        case .none: break
        case .free: free(UnsafeMutableRawPointer(mutating: base))
        case .unmap: munmap(UnsafeMutableRawPointer(mutating: base), count)
        case .custom(let queue, let block):
            if let queue { queue.async(execute: block) } else { block() }
        }
    }
}

/// An immutable run of bytes made of shared regions, like `DispatchData` (`dispatch_data_t`): what
/// ``TKDispatchIO`` reads and writes. Appending and taking subranges share the underlying buffers
/// instead of copying bytes; a buffer is released (freed, unmapped or handed to its custom
/// deallocator) when the last value using it goes. A value type and `Sendable`: nothing in it
/// changes after construction.
public struct TKDispatchData: RandomAccessCollection, Sendable, CustomDebugStringConvertible {
    /// How bytes given with `init(bytesNoCopy:deallocator:)` are released once no data uses them.
    public enum Deallocator: Sendable {
        /// `free()` (the bytes came from malloc).
        case free
        /// `munmap()` (the bytes came from mmap).
        case unmap
        /// Run the block, on `queue` (asynchronously) or, with nil, on the thread that dropped
        /// the last reference.
        case custom(TKDispatchQueue?, @Sendable () -> Void)
    }

    /// A slice of a buffer.
    struct Region: Sendable {
        let buffer: DataBuffer
        let offset: Int
        let count: Int
        var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: buffer.base + offset, count: count) }
    }

    /// The regions, none empty, in order; `starts[i]` is where region i begins.
    private(set) var parts: [Region] = []
    private var starts: [Int] = []
    /// The number of bytes, over all regions.
    public private(set) var count = 0

    /// No bytes.
    public static let empty = TKDispatchData()

    /// Creates data with no bytes (the same as ``empty``).
    public init() {}

    /// A copy of `bytes`.
    public init(bytes: UnsafeRawBufferPointer) {
        if bytes.count > 0 { append(region: Region(buffer: DataBuffer(copying: bytes), offset: 0, count: bytes.count)) }
    }

    /// A copy of `bytes`.
    public init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        let array = Array(bytes)
        self = array.withUnsafeBytes { TKDispatchData(bytes: $0) }
    }

    /// `bytes` themselves, not copied: they must not change while any data uses them, and are
    /// released by `deallocator` once none does.
    public init(bytesNoCopy bytes: UnsafeRawBufferPointer, deallocator: Deallocator = .free) {
        guard let base = bytes.baseAddress else { return }
        let buffer = DataBuffer(base: base, count: bytes.count, deallocator: deallocator)
        if bytes.count > 0 { append(region: Region(buffer: buffer, offset: 0, count: bytes.count)) }
    }

    /// Appends one region. Counts past Int.max are refused: regions share buffers, so a data
    /// value can claim more bytes than memory holds (a region appended to itself again and
    /// again, or a buffer given with a count it does not have), and `count` must still be true.
    /// dispatch_data_create_concat's size_t sum wraps silently there; this stops the process.
    private mutating func append(region: Region) {
        guard region.count > 0 else { return }
        let (total, overflow) = count.addingReportingOverflow(region.count)
        if overflow {
            misuse(
                "TKDispatchData.append: the data would hold \(count) + \(region.count) bytes, more than Int.max. "
                    + "Fix: keep a data value's total size within Int.max bytes (split it into several values).")
        }
        starts.append(count)
        parts.append(region)
        count = total
    }

    // MARK: Combining (no bytes copied)

    /// Appends `other`'s regions (dispatch_data_create_concat): no bytes are copied.
    public mutating func append(_ other: TKDispatchData) {
        for region in other.parts { append(region: region) }
    }

    /// Appends a copy of `bytes`.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        append(TKDispatchData(bytes: bytes))
    }

    /// The bytes in `range` (dispatch_data_create_subrange), sharing this data's buffers. A
    /// range outside `0..<count` is a misuse that stops the process.
    public func subdata(in range: Range<Int>) -> TKDispatchData {
        guard range.lowerBound >= 0, range.upperBound <= count else {
            misuse("TKDispatchData.subdata(in: \(range)) is outside the data's \(count) bytes. Fix: pass a range within 0..<count.")
        }
        var result = TKDispatchData()
        guard !range.isEmpty else { return result }
        var i = regionIndex(containing: range.lowerBound)
        var position = range.lowerBound
        while position < range.upperBound {
            let region = parts[i]
            let inRegion = position - starts[i]
            let take = Swift.min(region.count - inRegion, range.upperBound - position)
            result.append(region: Region(buffer: region.buffer, offset: region.offset + inRegion, count: take))
            position += take
            i += 1
        }
        return result
    }

    /// Each contiguous region as a data value of its own (dispatch_data_apply's regions).
    public var regions: [TKDispatchData] {
        parts.map { region in
            var one = TKDispatchData()
            one.append(region: region)
            return one
        }
    }

    /// The region holding byte `location`, and where that region begins in this data
    /// (dispatch_data_copy_region). A location outside `0..<count` is a misuse.
    public func region(location: Int) -> (data: TKDispatchData, offset: Int) {
        guard location >= 0, location < count else {
            misuse(
                "TKDispatchData.region(location: \(location)) is outside the data's \(count) bytes. "
                    + "Fix: pass a location within 0..<count.")
        }
        let i = regionIndex(containing: location)
        var one = TKDispatchData()
        one.append(region: parts[i])
        return (one, starts[i])
    }

    // MARK: Reading the bytes

    /// Calls `block` with each region's bytes and where they begin, in order, until it sets
    /// `stop` (dispatch_data_apply).
    public func enumerateBytes(_ block: (_ buffer: UnsafeBufferPointer<UInt8>, _ byteIndex: Int, _ stop: inout Bool) -> Void) {
        var stop = false
        for (i, region) in parts.enumerated() {
            block(region.bytes.bindMemory(to: UInt8.self), starts[i], &stop)
            if stop { return }
        }
    }

    /// Calls `body` with the bytes contiguous: in place for data of one region, else a
    /// temporary copy (dispatch_data_create_map).
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if parts.count == 1 { return try body(parts[0].bytes) }
        if parts.isEmpty { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        defer { copy.deallocate() }
        _ = copyBytes(to: copy, from: 0..<count)
        return try body(UnsafeRawBufferPointer(copy))
    }

    /// Copies the bytes of `range` (all of them if nil) to `destination`, at most as many as fit;
    /// returns how many were copied.
    @discardableResult
    public func copyBytes(to destination: UnsafeMutableRawBufferPointer, from range: Range<Int>? = nil) -> Int {
        let range = range ?? 0..<count
        let wanted = subdata(in: range)
        var copied = 0
        for region in wanted.parts {
            let n = Swift.min(region.count, destination.count - copied)
            guard n > 0, let target = destination.baseAddress else { break }
            memcpy(target + copied, region.bytes.baseAddress!, n)
            copied += n
        }
        return copied
    }

    // MARK: Collection

    /// Always 0: bytes are indexed from the start of the data, across regions.
    public var startIndex: Int { 0 }
    /// ``count``: one past the last byte.
    public var endIndex: Int { count }

    /// The byte at `position` (a binary search over the regions). An index outside `0..<count`
    /// is a misuse that stops the process.
    public subscript(position: Int) -> UInt8 {
        guard position >= 0, position < count else {
            misuse("TKDispatchData[\(position)] is outside the data's \(count) bytes. Fix: index within 0..<count.")
        }
        let i = regionIndex(containing: position)
        return parts[i].bytes[position - starts[i]]
    }

    /// Binary search over `starts`. `location` is within 0..<count.
    private func regionIndex(containing location: Int) -> Int {
        var low = 0
        var high = parts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if starts[mid] <= location { low = mid } else { high = mid - 1 }
        }
        return low
    }

    /// The byte count and the number of regions, as `TKDispatchData { 12 bytes in 2 regions }`.
    public var debugDescription: String {
        "TKDispatchData { \(count) bytes in \(parts.count) region\(parts.count == 1 ? "" : "s") }"
    }
}
